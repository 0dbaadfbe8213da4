"""Mixed-cause ground truth: a slow loader (6 ms per batch) and four 4096^3 float32 products followed by torch.cuda.synchronize().

Sizes and the measured costs: see mixed_common.py; writes $MIXED_TRUTH.
"""
from __future__ import annotations

import mixed_common

if __name__ == "__main__":
    mixed_common.main("mixed_loader_matmul", {'loader': 6, 'matmul': 4})
