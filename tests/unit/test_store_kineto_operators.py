"""The ``operators`` table of Kineto imports: every spelling of operators and Python frames,
nesting, call sites, and the same table from both import routes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kineto_checks import assert_identical_runs
from perfscope.store import open_run
from perfscope.store.kineto import import_kineto, native, operators

T0 = 1_700_000_000_000_000  # µs (epoch)


def op(name: str, ts: float, dur: float, *, cat: str = "cpu_op", tid: Any = 10, ext: int | None = None,
       ext_key: str = "External id") -> dict[str, Any]:
    args = {ext_key: ext, "Input Dims": [[2, 2]]} if ext is not None else {}
    return {"ph": "X", "cat": cat, "name": name, "pid": 10, "tid": tid, "ts": T0 + ts, "dur": dur, "args": args}


def frame(name: str, ts: float, dur: float, tid: int = 10) -> dict[str, Any]:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": 10, "tid": tid, "ts": T0 + ts, "dur": dur,
            "args": {"Python id": 1, "Python parent id": 0}}


def runtime(name: str, ts: float, dur: float, corr: int, *, cat: str = "cuda_runtime", tid: Any = 10) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 10, "tid": tid, "ts": T0 + ts, "dur": dur,
            "args": {"correlation": corr, "cbid": 211}}


def kernel(ts: float, dur: float, corr: int, cat: str = "kernel") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": "k", "pid": 0, "tid": 7, "ts": T0 + ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}


def write(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def both_routes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Path) -> pd.DataFrame:
    """The operators table of ``path`` imported natively and with msgspec (asserted equal)."""
    before = native.outcomes["native"]
    ra = import_kineto(path, tmp_path / "native")
    assert native.outcomes["native"] == before + 1, dict(native.outcomes)
    monkeypatch.setattr(native, "ENABLED", False)
    rb = import_kineto(path, tmp_path / "msgspec")
    monkeypatch.undo()
    assert_identical_runs(tmp_path / "native", tmp_path / "msgspec", ra, rb, table_order=True)
    return open_run(tmp_path / "native").table("operators")


# -- spellings -----------------------------------------------------------------------------
NESTED = [("aten::linear", 0, 100), ("aten::t", 1, 4), ("aten::addmm", 10, 80), ("aten::empty", 12, 3)]


@pytest.mark.parametrize("spelling", ["today", "pytorch-1.9", "rocm"])
def test_every_spelling_of_operators_gives_the_same_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          spelling: str) -> None:
    old = spelling == "pytorch-1.9"
    cat, tid, ext_key = ("Operator", "10", "external id") if old else ("cpu_op", 10, "External id")
    launch = "hipLaunchKernel" if spelling == "rocm" else "cudaLaunchKernel"
    events = [op(n, ts, d, cat=cat, tid=tid, ext=i + 1, ext_key=ext_key) for i, (n, ts, d) in enumerate(NESTED)]
    events += [runtime(launch, 20, 5, 1, cat="Runtime" if old else "cuda_runtime", tid=tid),
               kernel(30, 10, 1, cat="Kernel" if old else "kernel")]
    ops = both_routes(tmp_path, monkeypatch, write(tmp_path, events))
    assert ops["name"].tolist() == ["aten::linear", "aten::t", "aten::addmm", "aten::empty"]
    assert ops["kind"].tolist() == ["cpu_op"] * 4 and ops["tid"].tolist() == [10] * 4
    assert ops["external_id"].tolist() == [1, 2, 3, 4]
    assert ops["depth"].tolist() == [0, 1, 1, 2] and ops["parent"].tolist()[1:] == [0, 0, 2]
    assert pd.isna(ops["parent"].iloc[0]) and ops["call_site"].isna().all()
    assert ops["start_ns"].iloc[2] == (T0 + 10) * 1000 and ops["dur_ns"].iloc[2] == 80_000


def test_rows_are_in_preorder_per_thread_and_the_run_span_is_unchanged(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Text order is not time order; two threads; an operator outside the GPU activity.
    events = [op("b", 50, 10, tid=2), op("a", 0, 100, tid=2), op("x", 5, 1, tid=1), op("early", -500, 1, tid=1),
              runtime("cudaLaunchKernel", 0, 5, 1, tid=2), kernel(10, 10, 1)]
    ops = both_routes(tmp_path, monkeypatch, write(tmp_path, events))
    assert ops["name"].tolist() == ["early", "x", "a", "b"] and ops["parent"].tolist()[3] == 2
    rank = open_run(tmp_path / "native").meta["ranks"][0]
    assert rank["started_ns"] == T0 * 1000  # the api call's start, not the operator's


def test_python_frames_nest_with_operators_and_name_the_call_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        frame("train.py(40): main", 0, 1000),
        frame("train.py(42): step", 10, 500),
        frame("/usr/lib/python3.10/site-packages/torch/nn/modules/module.py(1102): _call_impl", 20, 300),
        frame("<built-in method matmul of type object at 0x7f>", 30, 100),
        op("aten::matmul", 31, 90, ext=7),
        op("aten::mm", 32, 80, ext=8),
        op("aten::item", 600, 50, ext=9),  # under main only
        op("aten::add", 2000, 5, ext=10),  # under no frame
    ]
    ops = both_routes(tmp_path, monkeypatch, write(tmp_path, events))
    site = dict(zip(ops["name"], ops["call_site"].astype(object).where(ops["call_site"].notna(), None)))
    assert site["aten::matmul"] == site["aten::mm"] == "train.py(42): step"
    assert site["aten::item"] == "train.py(40): main" and site["aten::add"] is None
    assert site["train.py(40): main"] is None and site["train.py(42): step"] == "train.py(40): main"
    kinds = dict(zip(ops["name"], ops["kind"]))
    assert kinds["train.py(42): step"] == "python_function" and kinds["aten::mm"] == "cpu_op"
    assert dict(zip(ops["name"], ops["depth"]))["aten::mm"] == 5


def test_negative_durations_are_dropped_without_moving_parents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [op("bad", 5, -3), op("outer", 0, 100), op("inner", 10, 10)]
    result = import_kineto(write(tmp_path, events), tmp_path / "r")
    ops = open_run(tmp_path / "r").table("operators")
    assert ops["name"].tolist() == ["outer", "inner"] and ops["parent"].tolist()[1] == 0
    assert any("negative dur" in w and "operators: 1" in w for w in result.warnings)


@pytest.mark.parametrize(("name", "user"), [
    ("train.py(42): step", True), ("/home/me/proj/model/net.py(7): forward", True),
    ("torch/nn/modules/module.py(1102): _call_impl", False),
    ("/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py(1): relu", False),
    ("/opt/conda/lib/python3.10/site-packages/timm/x.py(1): f", False),
    ("/usr/lib/python3.10/threading.py(870): run", False),
    ("<built-in method add of Tensor object at 0x1>", False), ("nn.Module: Linear_0", False),
    ("<frozen importlib._bootstrap>(1): f", False),
])
def test_user_frames(name: str, user: bool) -> None:
    assert operators.is_user_frame(name) is user


# -- the nesting rule, native and Python --------------------------------------------------
def _preorder(n: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    thread = np.sort(rng.integers(0, 3, n))
    start = rng.integers(0, 50, n)
    end = start + rng.integers(0, 30, n)  # overlaps, equal spans and zero lengths
    order = np.lexsort((-end, start, thread))
    return thread[order], end[order], rng.random(n) < 0.3, rng.random(n) < 0.05


@given(st.integers(0, 60), st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_native_nesting_equals_the_python_rule(n: int, seed: int) -> None:
    thread, end, is_site, skip = _preorder(n, seed)
    got = operators.nest(thread, end, is_site, skip)
    assert operators._load() is not None
    want = operators._nest_python(thread, end, is_site, skip)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    parent, depth, site = want
    for i in range(n):  # a parent comes first, on the same thread, and contains the row
        p = parent[i]
        if p >= 0:
            assert p < i and thread[p] == thread[i] and end[p] >= end[i] and depth[i] == depth[p] + 1
            assert not skip[p] and not skip[i]
        if site[i] >= 0:
            assert is_site[site[i]]


def test_without_the_library_the_python_rule_nests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [op(n, ts, d) for n, ts, d in NESTED]
    operators.use_native(False)
    try:
        import_kineto(write(tmp_path, events), tmp_path / "py")
    finally:
        operators.use_native(True)
    import_kineto(write(tmp_path, events), tmp_path / "c")
    a, b = (open_run(tmp_path / x).table("operators") for x in ("py", "c"))
    pd.testing.assert_frame_equal(a, b)
    assert a["depth"].tolist() == [0, 1, 1, 2]


# -- the pre-filter's tally of dropped categories (issue #21) -----------------------------
def _late_unknown_trace(n: int) -> dict[str, Any]:
    """Today's spelling from the start; an unknown category only after the first 64 KB,
    in both halves of the text (the filter's two threads) and at its end."""
    events = [op(f"aten::op{i}", i, 1) for i in range(n)]
    for at in (n // 3, 2 * n // 3, n):
        events.insert(at, {"ph": "X", "cat": "gpu_hw_counter", "name": "x", "pid": 0, "tid": 1, "ts": T0, "dur": 1})
    events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": 0, "tid": 1, "ts": T0, "dur": 1})
    return {"schemaVersion": 1, "traceEvents": events}


@pytest.mark.parametrize("gz", [False, True])
def test_a_category_first_seen_late_is_named_in_the_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            gz: bool) -> None:
    import gzip

    from perfscope.store.kineto import prefilter, read

    monkeypatch.setattr(read, "_STREAM_BYTES", 1 << 10)  # (the streamed filter takes the gzip file)
    text = json.dumps(_late_unknown_trace(40_000)).encode()
    assert b"gpu_hw_counter" not in text[:1 << 16] and len(text) > 4 << 20
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text, 1) if gz else text)
    kept = prefilter.run(text, read.FILTER_RULES)
    assert kept.split and kept.dropped == {"gpu_hw_counter": 3, "Trace": 1}
    result = import_kineto(path, tmp_path / "run")
    (warning,) = [w for w in result.warnings if "dropped" in w]
    assert "dropped 3 events of categories perfscope does not know: 'gpu_hw_counter' 3" in warning
    assert warning.removeprefix("rank 0: ") in open_run(tmp_path / "run").meta["ranks"][0]["warnings"]
    assert result.total("operators") == 40_000
