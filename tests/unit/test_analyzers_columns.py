"""The per-rank analysis on columns (``{name: array}``, names as codes) gives what the
DataFrame analyzers give, and the literal tests in front of the classification regexes never
change a regex's answer."""
from __future__ import annotations

import random
import string

import numpy as np
import pandas as pd
import pytest

from perfscope.analyzers import classify
from perfscope.analyzers.rank_pass import PCIE_MEMORY_KERNEL_RE, _is_pcie_memory_kernel
from perfscope.analyzers.columns import bools, columns, is_null, n_rows, take
from perfscope.analyzers.gpu_summary import summary_row
from perfscope.analyzers.kernels import LaunchThresholds, launch_row, top_kernels
from perfscope.analyzers.steps import rank_windows, step_windows
from perfscope.store.reader import Coded

FRAGMENTS = ["nccl", "NCCL", "NcCl", "rccl", "msccl", "mscclpp", "hccl", "ſ", "K", "Kernel", "kernel", "Dev", "dev", ":", "_",
             "HtoD", "dtoh", "H2D", "d2H", "PtoP", "htoh", "Memcpy", "Memset", "memcpy", "Sync", "dma", "[", "\n", " ", "void ",
             "AllReduce", "<float>", "(", ")"]


def _names(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alpha = string.ascii_letters + string.digits + "ſK_: \n<>()#"
    return ["".join(rng.choice(FRAGMENTS) if rng.random() < 0.5 else rng.choice(alpha) for _ in range(rng.randint(0, 10)))
            for _ in range(n)]


def test_literal_tests_agree_with_the_regexes() -> None:
    for name in _names(60_000, 1):
        assert classify._is_comm_name(name) == bool(classify.COMM_NAME_RE.search(name)), name
        assert _is_pcie_memory_kernel(name) == bool(PCIE_MEMORY_KERNEL_RE.search(name)), name
        want = ("COMMUNICATION" if classify._HTA_COMM(name) else "MEMORY" if classify._HTA_MEMORY(name)
                else "OTHER" if classify._HTA_NOT_COMPUTE(name) else "COMPUTATION")
        assert classify._hta_type(name) == want, name


def test_columns_helpers() -> None:
    df = pd.DataFrame({"a": [1, 2, 3], "b": pd.array([1, None, 3], dtype="Int64"), "c": pd.Categorical(["x", "y", "x"]),
                       "d": np.array([True, None, False], dtype=object)})
    cols = columns(df)
    assert isinstance(cols["a"], np.ndarray) and isinstance(cols["b"], pd.arrays.IntegerArray)
    assert isinstance(cols["c"], pd.Categorical)
    assert n_rows(cols) == n_rows(df) == 3 and n_rows({}) == 0 and n_rows(None) == 0
    assert is_null(cols["b"]).tolist() == [False, True, False] and is_null(cols["a"]).tolist() == [False] * 3
    assert bools(cols["d"]).tolist() == [True, False, False]
    part = take(cols, np.array([True, False, True]), ("a", "c", "missing"))
    assert list(part) == ["a", "c"] and part["a"].tolist() == [1, 3] and list(part["c"]) == ["x", "x"]


def _coded(values: list[str | None]) -> Coded:
    cat = pd.Categorical(values)
    return Coded(np.asarray(cat.codes, dtype=np.int32), np.asarray(cat.categories, dtype=object))


def test_classification_of_codes_equals_that_of_strings() -> None:
    names = _names(400, 2) + [None, None]
    coded, plain = _coded(names), pd.Series(names, dtype=object)
    assert classify.kernel_kind(coded).tolist() == classify.kernel_kind(plain).tolist()
    assert classify.hta_is_computation(coded).tolist() == classify.hta_is_computation(plain).tolist()
    assert classify.name_values(coded).tolist() == classify.name_values(plain).tolist()
    assert classify.name_matches(coded, r"(?i)nccl").tolist() == classify.name_matches(plain, r"(?i)nccl").tolist()


def _rank_tables(seed: int) -> dict[str, pd.DataFrame]:
    """One rank's tables as analyze_run builds them (GPU events with their launch calls)."""
    rng = np.random.default_rng(seed)
    n = 300
    api_start = np.cumsum(rng.integers(1_000, 20_000, n))
    k_start = api_start + rng.integers(2_000, 40_000, n)
    names = rng.choice(["gemm", "ncclDevKernel_AllReduce", "Memcpy HtoD", "relu"], n)
    k = pd.DataFrame({"rank": 0, "start_ns": k_start, "dur_ns": rng.integers(500, 30_000, n),
                      "correlation": np.arange(n), "name": pd.Categorical(names)})
    api = pd.DataFrame({"rank": 0, "start_ns": api_start, "dur_ns": rng.integers(1_000, 9_000, n),
                        "correlation": np.arange(n), "name": pd.Categorical(["cudaLaunchKernel"] * n)})
    found = rng.random(n) < 0.9
    gpu = pd.DataFrame({"rank": 0, "start_ns": k["start_ns"], "end_ns": k["start_ns"] + k["dur_ns"],
                        "launched": found, "launch_ns": api_start, "hta_compute": names == "gemm", "layer": np.int8(0)})
    edges = np.linspace(0, int(k_start[-1]), 6).astype(np.int64)
    steps = pd.DataFrame({"rank": 0, "step": pd.array([1, 2, None, 4, 5], dtype="Int64"), "start_ns": edges[:-1],
                          "dur_ns": np.diff(edges) // 2, "name": pd.Categorical([f"ProfilerStep#{i}" for i in range(1, 6)]),
                          "source": pd.Categorical(["profiler_step"] * 5)})
    markers = pd.DataFrame({"rank": 0, "start_ns": edges[:-1], "dur_ns": np.diff(edges), "name": pd.Categorical(["iter"] * 5),
                            "device": pd.array([None, 0, None, None, 1], dtype="Int64")})
    host = pd.DataFrame({"rank": pd.Series(dtype="int64"), "start_ns": pd.Series(dtype="int64"),
                         "dur_ns": pd.Series(dtype="int64"), "kind": pd.Categorical([]), "name": pd.Categorical([])})
    return {"kernels": k, "api": api, "gpu": gpu, "steps": steps, "markers": markers, "host": host}


def _as_read(df: pd.DataFrame) -> dict:
    """The columns of ``df`` as ``Run.arrays(..., coded=True)`` gives them."""
    return {c: Coded(np.asarray(v.codes), np.asarray(v.categories, dtype=object)) if isinstance(v, pd.Categorical) else v
            for c, v in columns(df).items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("pattern", [None, r"iter"])
def test_columns_give_what_frames_give(seed: int, pattern: str | None) -> None:
    t = _rank_tables(seed)
    c = {name: _as_read(df) for name, df in t.items()}
    # Step windows: one rank from columns = step_windows on the frames.
    warnings: list[str] = []
    w = rank_windows(0, c["steps"], c["markers"], c["host"], c["api"], c["gpu"], warnings, step_pattern=pattern)
    want = step_windows(t["steps"], t["markers"], t["host"], t["api"], t["gpu"], [0], step_pattern=pattern)
    pd.testing.assert_frame_equal(pd.DataFrame(w), want.windows, check_exact=True)
    assert warnings == want.warnings
    # GPU summary row, kernel table and launch row.
    for flt in (True, False):
        assert summary_row(0, c["gpu"], c["api"], c["steps"], flt, True) == summary_row(0, t["gpu"], t["api"], t["steps"], flt, True)
    kinds = classify.kernel_kind(t["kernels"]["name"])
    pd.testing.assert_frame_equal(top_kernels(c["kernels"], kinds, top_n=2), top_kernels(t["kernels"], kinds, top_n=2), check_exact=True)
    win = (w["start_ns"], w["end_ns"])
    for launch in (None, (np.ones(300, bool), np.arange(300))):
        got = launch_row(0, c["kernels"], c["api"], c["gpu"], LaunchThresholds(), launch, win)
        assert got == launch_row(0, t["kernels"], t["api"], t["gpu"], LaunchThresholds(), launch, win)
