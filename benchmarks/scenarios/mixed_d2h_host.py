"""Mixed-cause ground truth: a 128 MiB pageable device-to-host copy (into a preallocated tensor) and 5 ms of Python work.

Sizes and the measured costs: see mixed_common.py; writes $MIXED_TRUTH.
"""
from __future__ import annotations

import mixed_common

if __name__ == "__main__":
    mixed_common.main("mixed_d2h_host", {'d2h': 128, 'host': 5})
