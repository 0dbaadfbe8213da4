"""Mixed-cause ground truth: three causes: a loader (4 ms), a 32 MiB pageable host-to-device copy, six 4096^3 float32 products + sync.

Sizes and the measured costs: see mixed_common.py; writes $MIXED_TRUTH.
"""
from __future__ import annotations

import mixed_common

if __name__ == "__main__":
    mixed_common.main("mixed_loader_h2d_matmul", {'loader': 4, 'h2d': 32, 'matmul': 6})
