"""HTA-style GPU summary on hand-made events."""
from __future__ import annotations

import pandas as pd

from perfscope.analyzers.gpu_summary import gpu_summary


def test_span_idle_compute_non_compute() -> None:
    gpu = pd.DataFrame({"rank": [0, 0, 0, 0], "start_ns": [0, 5000, 20000, 40000], "end_ns": [10000, 15000, 30000, 50000],
                        "correlation": [1, 2, 3, 4], "hta_type": ["COMPUTATION", "COMMUNICATION", "MEMORY", "COMPUTATION"]})
    g = gpu_summary(gpu, hta_compat=False).iloc[0]
    assert (g["span_ns"], g["idle_ns"], g["compute_ns"], g["non_compute_ns"]) == (50000, 15000, 20000, 15000)


def test_hta_rounding_and_last_step_filter() -> None:
    gpu = pd.DataFrame({"rank": [0, 0, 0], "start_ns": [100, 3500, 9000], "end_ns": [2900, 5200, 9900],
                        "correlation": [1, 2, 3], "hta_type": "COMPUTATION"})
    api = pd.DataFrame({"rank": [0, 0, 0], "correlation": [1, 2, 3], "start_ns": [0, 3000, 8000]})
    steps = pd.DataFrame({"rank": [0, 0], "source": "profiler_step", "name": ["ProfilerStep#1", "ProfilerStep#2"], "start_ns": [0, 7000]})
    g = gpu_summary(gpu, api, steps).iloc[0]
    # kernel 3 was launched in the last step: dropped; starts rounded up, ends down to the us.
    assert bool(g["last_step_excluded"]) and g["events"] == 2
    assert (g["span_ns"], g["compute_ns"], g["idle_ns"]) == (4000, 2000, 2000)  # [1000,2000) + [4000,5000)


def test_hta_round_emulates_float_microseconds() -> None:
    import numpy as np

    from perfscope.analyzers.gpu_summary import hta_round

    # 1712195495505583.047 us parses to ...583.0 in float64 (0.25 us spacing): ceil -> 583.
    s = np.array([1712195495505583047], dtype=np.int64)
    e = s + 4928
    rs, re_ = hta_round(s, e)
    assert rs[0] == 1712195495505583000 and re_[0] == 1712195495505588000  # 583.0 + 4.928 -> 588.0 in float64
    # Relative to a base (Kineto baseTimeNanoseconds) the fraction survives: ceil -> 584.
    base = 1712195000000000000
    rs, _ = hta_round(s, e, base)
    assert rs[0] == 1712195495505584000
