"""Mixed-cause ground truth: a slow loader (12 ms of sleep per batch) and a 128 MiB pageable host-to-device copy.

Sizes and the measured costs: see mixed_common.py; writes $MIXED_TRUTH.
"""
from __future__ import annotations

import mixed_common

if __name__ == "__main__":
    mixed_common.main("mixed_loader_h2d", {'loader': 12, 'h2d': 128})
