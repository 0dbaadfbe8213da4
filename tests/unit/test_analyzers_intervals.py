"""Interval and join helpers: exact equivalence with the plain numpy/pandas formulations."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfscope.analyzers.intervals import KeyIndex, launch_of, lookup, merge, stable_argsort


def test_stable_argsort_is_numpys_stable_argsort() -> None:
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 7, 1000):
        for hi in (1, 3, 1 << 20, 1 << 62):
            v = rng.integers(-5, hi, n)
            assert (stable_argsort(v) == np.argsort(v, kind="stable")).all()
    extreme = np.array([1 << 62, -(1 << 62), 0, 5, 5])  # range too wide to pack: falls back
    assert (stable_argsort(extreme) == np.argsort(extreme, kind="stable")).all()


def test_key_index_finds_what_lookup_finds() -> None:
    # GIVEN keys with repeats and nulls (NaN never matches), probed with misses and nulls
    keys = np.array([5, 3, np.nan, 5, 9, 1], dtype="float64")
    query = np.array([5, 9, 4, np.nan, 1, 3, 100], dtype="float64")
    found, pos = KeyIndex(keys).find(query)
    f2, v2 = lookup(keys, np.arange(keys.size), query)
    assert found.tolist() == f2.tolist() == [True, True, False, False, True, True, False]
    assert (pos[found] == v2[found]).all() and pos[0] == 0  # the first 5 wins
    empty_found, _ = KeyIndex(np.zeros(0)).find(query)
    assert not empty_found.any()


def test_launch_of_uses_precomputed_columns_or_looks_up() -> None:
    api = pd.DataFrame({"correlation": [1, 2, 3], "start_ns": [10, 20, 30]})
    gpu = pd.DataFrame({"correlation": [3.0, 7.0, 1.0]})
    found, start = launch_of(gpu, api)
    assert found.tolist() == [True, False, True] and start[found].tolist() == [30, 10]
    pre = gpu.assign(launched=[True, False, True], launch_ns=[30, 0, 10]).drop(columns="correlation")
    f2, s2 = launch_of(pre, api.iloc[0:0])
    assert f2.tolist() == found.tolist() and s2[f2].tolist() == [30, 10]


def test_merge_of_sorted_and_unsorted_input_agree() -> None:
    rng = np.random.default_rng(1)
    s = rng.integers(0, 1000, 500)
    e = s + rng.integers(-5, 40, 500)
    order = np.argsort(s, kind="stable")
    a, b = merge(s, e), merge(s[order], e[order])
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
