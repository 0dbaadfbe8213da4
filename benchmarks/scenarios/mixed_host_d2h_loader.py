"""Mixed-cause ground truth: three causes: 10 ms of Python work, a 32 MiB pageable device-to-host copy, a loader (16 ms).

Sizes and the measured costs: see mixed_common.py; writes $MIXED_TRUTH.
"""
from __future__ import annotations

import mixed_common

if __name__ == "__main__":
    mixed_common.main("mixed_host_d2h_loader", {'host': 10, 'd2h': 32, 'loader': 16})
