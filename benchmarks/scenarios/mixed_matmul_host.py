"""Mixed-cause ground truth: two 4096^3 float32 products + torch.cuda.synchronize(), then 15 ms of Python work with the GPU idle.

Sizes and the measured costs: see mixed_common.py; writes $MIXED_TRUTH.
"""
from __future__ import annotations

import mixed_common

if __name__ == "__main__":
    mixed_common.main("mixed_matmul_host", {'matmul': 2, 'host': 15})
