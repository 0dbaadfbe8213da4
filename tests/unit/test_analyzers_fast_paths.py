"""The numpy paths that replaced per-call pandas work give what the pandas code gave.

Each reference below is the former pandas implementation, kept here as the specification.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from perfscope.analyzers.breakdown import by_rank_sorted
from perfscope.analyzers.classify import (
    COMM_NAME_RE, HTA_COMM_RE, HTA_MEMORY_RE, HTA_NOT_COMPUTE_RE, MEMORY_NAME_RE, hta_kernel_type, kernel_kind, normalize_func,
)
from perfscope.analyzers.gpu_summary import summary_frame
from perfscope.analyzers.kernels import KERNEL_COLUMNS, top_kernels
from perfscope.analyzers.steps import _step_numbers
from perfscope.store.names import COLLECTIVE_ALIASES

NAMES = ["sgemm_128", "ncclDevKernel_AllReduce_Sum_f32", "void nccl_weird_Kernel", "Memcpy HtoD (Pageable -> Device)",
         "Memset (Device)", "dma_copy", "elementwise_kernel", "cudaDeviceSynchronize_like", "ncclKernel_AllGather_RING", ""]


def test_by_rank_sorted_orders_ties_like_groupby_then_sort_values() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 5, 17, 40, 300):
        df = pd.DataFrame({"rank": rng.integers(0, 3, n), "start_ns": rng.integers(0, 6, n),  # many ties
                           "step": np.arange(n), "name": [f"s{i}" for i in range(n)]})
        want = [(int(r), g.sort_values("start_ns").reset_index(drop=True)) for r, g in df.groupby("rank", sort=True)]
        got = by_rank_sorted(df)
        assert [r for r, _ in got] == [r for r, _ in want]
        for (_, a), (_, b) in zip(got, want):
            pd.testing.assert_frame_equal(a, b)


def _top_kernels_pandas(kernels: pd.DataFrame, kinds: np.ndarray, top_n: int | None) -> pd.DataFrame:
    """The former implementation (multi-rank branch), all in pandas."""
    names = kernels["name"].astype(str).to_numpy(object)
    out = pd.DataFrame({"rank": kernels["rank"], "name": names, "dur": kernels["dur_ns"], "kind": kinds,
                        "pos": np.arange(len(kernels))})
    out = out.sort_values(["rank", "name", "dur", "pos"], kind="stable")
    g = out.groupby(["rank", "name"], sort=False)
    res = pd.DataFrame({
        "count": g.size(), "total_ns": g["dur"].sum(), "mean_ns": g["dur"].mean(), "median_ns": g["dur"].median(),
        "max_ns": g["dur"].max(), "kind": g["kind"].first(),
    }).reset_index()
    tot = res.groupby("rank")["total_ns"].transform("sum")
    res["share"] = (res["total_ns"] / tot.where(tot > 0)).fillna(0.0)
    res = res.sort_values(["rank", "total_ns"], ascending=[True, False], kind="stable")
    if top_n is not None:
        res = res.groupby("rank", sort=False).head(top_n)
    for c in ("count", "total_ns", "max_ns"):
        res[c] = res[c].astype("int64")
    res["mean_ns"] = res["mean_ns"].round().astype("int64")
    res["median_ns"] = res["median_ns"].round().astype("int64")
    return res[list(KERNEL_COLUMNS)].reset_index(drop=True)


@pytest.mark.parametrize("top_n", [None, 3, 1, 0, -2])
@pytest.mark.parametrize("ranks", [1, 3])
def test_top_kernels_matches_pandas(top_n: int | None, ranks: int) -> None:
    rng = np.random.default_rng(11)
    n = 400
    # Names in sorted order, so the codes' order is the names' order (the reference sorts by name).
    names = sorted({f"k{i:02d}" for i in range(12)})
    k = pd.DataFrame({"rank": np.sort(rng.integers(0, ranks, n)),
                      "name": pd.Categorical(rng.choice(names, n), categories=names),
                      "dur_ns": rng.integers(0, 4, n) * 1000})  # ties in duration and in totals
    kinds = rng.choice(np.array(["compute", "communication"], dtype=object), n)
    got = top_kernels(k, kinds, top_n=top_n)
    want = _top_kernels_pandas(k, kinds, top_n)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert [str(t) for t in got.dtypes] == ["int64", "str", "str", "int64", "int64", "int64", "int64", "int64", "float64"]


def test_classification_matches_pandas_string_methods() -> None:
    u = pd.Series(NAMES, dtype=object)
    kind = np.full(len(u), "compute", dtype=object)
    kind[u.str.contains(MEMORY_NAME_RE, regex=True).to_numpy(bool)] = "memory"
    comm = u.str.contains(COMM_NAME_RE, regex=True).to_numpy(bool) | u.isin(["elementwise_kernel"]).to_numpy(bool)
    kind[comm] = "communication"
    assert kernel_kind(NAMES, comm_kernel_names={"elementwise_kernel"}).tolist() == kind.tolist()
    want = np.select([u.str.match(HTA_COMM_RE).to_numpy(bool), u.str.match(HTA_MEMORY_RE).to_numpy(bool),
                      ~u.str.match(HTA_NOT_COMPUTE_RE).to_numpy(bool)], ["COMMUNICATION", "MEMORY", "COMPUTATION"], "OTHER")
    got = hta_kernel_type(NAMES)
    assert got.tolist() == want.tolist() and got.dtype == want.dtype


def test_normalize_func_matches_pandas() -> None:
    funcs = ["allreduce", "nccl:all_reduce", "AllReduce", "c10d_broadcast", "gloo:_allgather_base", "weird", "NCCL_AllGather", ""]
    u = pd.Series(funcs, dtype=object)
    key = u.str.replace(r"^(?:nccl|c10d|gloo)[:_]*", "", regex=True).str.lower()
    mapped = key.map(lambda k: COLLECTIVE_ALIASES.get(k))
    want = np.where(mapped.isna(), u.to_numpy(object), mapped.to_numpy(object))
    assert normalize_func(funcs).astype(str).tolist() == list(want)


def test_step_numbers_match_pandas_extract() -> None:
    names = pd.Series(["ProfilerStep#12", "step 3 of 7", "no number", None, "x9y10", "ProfilerStep#4"], dtype=object)
    num = names.astype("string").str.extract(re.compile(r"(\d+)(?!.*\d)"), expand=False)
    want = pd.to_numeric(num, errors="coerce").fillna(pd.Series(np.arange(len(names)))).astype("int64").to_numpy()
    assert _step_numbers(names.to_numpy(object)).tolist() == want.tolist()


def test_summary_frame_matches_pandas() -> None:
    rows = [{"rank": 0, "span_ns": 10, "idle_ns": 2, "compute_ns": 5, "non_compute_ns": 3, "events": 4, "last_step_excluded": True},
            {"rank": 1, "span_ns": 0, "idle_ns": 0, "compute_ns": 0, "non_compute_ns": 0, "events": 1, "last_step_excluded": False}]
    want = pd.DataFrame(rows)
    span = want["span_ns"].where(want["span_ns"] > 0)
    for c in ("idle", "compute", "non_compute"):
        want[f"{c}_share"] = (want[f"{c}_ns"] / span).fillna(0.0)
    got = summary_frame(rows)
    pd.testing.assert_frame_equal(got, want[list(got.columns)])
    empty = summary_frame([])
    assert len(empty) == 0 and list(empty.columns) == list(got.columns)
