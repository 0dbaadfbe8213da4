"""Decoding raw CUPTI records into store tables: synthetic records and real H200 samples."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfscope.collectors.cupti import decode, layouts, samples
from perfscope.store.schema import table as table_decl

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "data" / "cupti").glob("*.npz"))


def _check_schema(tables: dict) -> None:
    for name, tbl in tables.items():
        assert tbl.schema == table_decl(name).arrow_schema, name


# ----------------------------------------------------------------- synthetic ----
def test_memcpy_kinds_bytes_and_pageable() -> None:
    r = np.zeros(3, layouts.MEMCPY)
    r["kind"] = layouts.KIND_MEMCPY
    r["copy_kind"] = [1, 2, 8]
    r["src_kind"] = [1, 3, 3]
    r["dst_kind"] = [3, 2, 3]
    r["bytes"] = [100, 200, 300]
    r["start"] = [10, 20, 30]
    r["end"] = [15, 0, 40]  # second: no end (forced flush)
    t = decode.decode_memcpy(r, offset_ns=1000).to_pydict()
    assert t["copy_kind"] == ["H2D", "D2H", "D2D"]
    assert t["src_kind"] == ["pageable", "device", "device"]
    assert t["dst_kind"] == ["device", "pinned", "device"]
    assert t["pageable"] == [True, False, False]
    assert t["bytes"] == [100, 200, 300]
    assert t["start_ns"] == [1010, 1020, 1030]
    assert t["dur_ns"] == [5, None, 10]


def test_untimed_records_are_dropped() -> None:
    r = np.zeros(2, layouts.MEMSET)
    r["start"] = [0, 5]
    r["end"] = [0, 9]
    r["bytes"] = 64
    assert decode.decode_memset(r).num_rows == 1


def test_markers_pair_across_drains() -> None:
    strings = decode.StringTable(["step 0", "dom"])
    def mk(flags: int, ts: int, id_: int, name: int = 0, domain: int = 0) -> np.ndarray:
        r = np.zeros(1, layouts.MARKER)
        r["kind"], r["flags"], r["timestamp"], r["id"], r["name"], r["domain"] = layouts.KIND_MARKER, flags, ts, id_, name, domain
        r["object_kind"], r["process_id"], r["thread_id"] = layouts.OBJECT_THREAD, 7, 8
        return r
    state = decode.MarkerState()
    first = np.concatenate([mk(layouts.MARKER_START, 100, 1, 1), mk(layouts.MARKER_START, 110, 2, 1, 2),
                            mk(layouts.MARKER_END, 150, 2), mk(layouts.MARKER_INSTANTANEOUS, 120, 3, 1)])
    t1 = decode.decode_markers(first, strings, 0, state).to_pydict()
    assert t1["start_ns"] == [110, 120] and t1["dur_ns"] == [40, 0]
    assert t1["domain"] == ["dom", None] and t1["tid"] == [8, 8] and t1["source"] == ["nvtx", "nvtx"]
    assert len(state.pending) == 1
    t2 = decode.decode_markers(mk(layouts.MARKER_END, 400, 1), strings, 0, state).to_pydict()
    assert t2["start_ns"] == [100] and t2["dur_ns"] == [300] and t2["name"] == ["step 0"]
    assert len(state.pending) == 0


def test_sync_device_from_context_and_tid_from_api() -> None:
    s = np.zeros(2, layouts.SYNC)
    s["type"] = [3, 4]
    s["start"], s["end"] = [10, 20], [12, 25]
    s["context_id"] = 1
    s["stream_id"] = [7, layouts.SYNC_INVALID]
    s["correlation_id"] = [5, 6]
    api = np.zeros(1, layouts.API)
    api["correlation_id"], api["thread_id"] = 5, 99
    t = decode.decode_sync(s, 0, context_device={1: 3}, api=api).to_pydict()
    assert t["sync_kind"] == ["stream", "context"]
    assert t["device"] == [3, 3] and t["stream"] == [7, None] and t["tid"] == [99, None]


def test_demangle() -> None:
    assert decode.demangle("_Z6kernelPf") in ("kernel(float*)", "_Z6kernelPf")
    assert decode.demangle("plain") == "plain"


# -------------------------------------------------------------- real samples ----
@pytest.fixture(params=SAMPLES, ids=[p.stem for p in SAMPLES])
def sample(request: pytest.FixtureRequest) -> tuple:
    return samples.load(request.param)


@pytest.mark.skipif(not SAMPLES, reason="no samples in tests/data/cupti")
def test_sample_decodes_into_store_tables(sample: tuple) -> None:
    raw, strings, meta = sample
    tables = decode.decode_all(raw, strings, meta["clock_offset_ns"])
    _check_schema(tables)
    counts = decode.counts(raw)
    assert counts == meta["counts"]
    k = tables["kernels"].to_pandas()
    assert len(k) == counts["kernel"] - int((decode.records(raw["kernel"], layouts.KERNEL)["start"] == 0).sum())
    assert k["name"].notna().all() and (k["name"].str.len() > 0).all()
    assert (k["dur_ns"] > 0).all()
    assert (k["start_ns"] > 1.7e18).all()  # Unix-epoch ns (2023 or later)
    assert ((k["grid_x"] > 0) & (k["block_x"] > 0)).all()
    for _, g in k.groupby("stream"):  # one stream runs kernels one after another: no overlap
        g = g.sort_values("start_ns")
        assert (g["start_ns"].to_numpy()[1:] >= (g["start_ns"] + g["dur_ns"]).to_numpy()[:-1]).all()
    api = tables["api"].to_pandas().set_index("correlation")
    launched = k[k["correlation"].isin(api.index)]
    assert len(launched) > 0.9 * len(k)
    # a kernel starts after the API call that launched it began
    assert (launched["start_ns"].to_numpy() > api.loc[launched["correlation"], "start_ns"].to_numpy()).all()


@pytest.mark.skipif(not SAMPLES, reason="no samples in tests/data/cupti")
def test_sample_copies_api_sync_markers(sample: tuple) -> None:
    raw, strings, meta = sample
    tables = decode.decode_all(raw, strings, meta["clock_offset_ns"])
    mc = tables["memcpy"].to_pandas()
    assert (mc["bytes"] > 0).all()
    assert {"H2D", "D2H"} <= set(mc["copy_kind"])
    h2d = mc[mc["copy_kind"] == "H2D"]
    assert set(h2d["src_kind"]) == {"pageable", "pinned"}
    assert (h2d["pageable"] == (h2d["src_kind"] == "pageable")).all()
    api = tables["api"].to_pandas()
    assert "cudaLaunchKernel" in set(api["name"]) and (api["kind"] == "runtime").all()
    assert (api["dur_ns"] >= 0).all()
    kern = tables["kernels"].to_pandas()
    assert len(set(kern["correlation"]) & set(api["correlation"])) > 0
    sync = tables["sync"].to_pandas()
    assert {"event", "context"} <= set(sync["sync_kind"])
    assert sync["device"].notna().all()
    mk = tables["markers"].to_pandas()
    assert mk["name"].str.startswith("step ").all() and (mk["dur_ns"] > 0).all()
    if "memset" in tables:
        ms = tables["memset"].to_pandas()
        assert (ms["bytes"] == 1 << 20).all() and (ms["value"] == 0).all()


def test_recorded_samples_are_committed() -> None:
    """The H200 raw-buffer sample is a committed fixture: its tests must never skip in CI."""
    assert SAMPLES, "tests/data/cupti/*.npz is missing (check .gitignore)"
