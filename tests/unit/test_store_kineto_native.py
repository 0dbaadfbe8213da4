"""The native route of Kineto imports (``perfscope/store/kineto/columns.c``, ``native.py``,
``native_tables.py``).

The extractor must read every value exactly as the msgspec decoders do, or flag the
event as odd (and the importer then takes the msgspec route); the tables built from its
columns must be the msgspec route's, column for column, row for row, with the same
warnings and rank metadata.
"""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from perfscope.errors import InputError
from perfscope.store import open_run
from hypothesis import given, settings
from hypothesis import strategies as st

from kineto_checks import KINETO_FIXTURES, SHARED_NAMES, assert_identical_runs
from perfscope.store.kineto import decode, import_kineto, prefilter
from perfscope.store.kineto import native as kineto_native
from perfscope.store.kineto.classify import FILTER_RULES


def _built() -> str | None:
    """Build the library in place when the install did not; the reason when it cannot be."""
    if not kineto_native.available():
        try:
            from perfscope.store.kineto import build

            build.build_in_place()
        except Exception as e:  # noqa: BLE001 - no compiler: nothing to test
            return f"the Kineto extractor is not built and cannot be: {e}"
        prefilter._load_failed = False
        kineto_native._load_failed = False
    return None if kineto_native.available() and prefilter.available() else "the Kineto extractor does not load"


_NOT_BUILT = _built()
if _NOT_BUILT is not None:  # pragma: no cover - the build is part of the install
    pytest.skip(_NOT_BUILT, allow_module_level=True)

DATA = Path(__file__).resolve().parents[1] / "data"


# -- helpers -----------------------------------------------------------------------------
def trace_text(events: list[str] | list[dict[str, Any]], head: str = '"schemaVersion": 1') -> str:
    """A trace's text with these events (JSON texts, or dicts to dump)."""
    texts = [e if isinstance(e, str) else json.dumps(e) for e in events]
    return "{" + head + (", " if head else "") + '"traceEvents": [' + ", ".join(texts) + "]}"


def extract(text: str | bytes) -> kineto_native.Extracted:
    """The extractor on the filtered ``text``."""
    kept = prefilter.run(text.encode() if isinstance(text, str) else text, FILTER_RULES)
    assert kept.error is None, kept
    return kineto_native.extract(kept.text, kept.kept)


def one(event: dict[str, Any] | str) -> dict[str, Any]:
    """The extractor's row for a single kept event: its values, None where absent, the
    name, and the odd reasons."""
    ext = extract(trace_text([event]))
    assert ext.rows is not None and len(ext.rows) == 1, ext
    rows = ext.rows
    present = int(rows.col("present")[0])
    row: dict[str, Any] = {}
    for i, name in enumerate(kineto_native.FIELDS):
        value = int(rows.col(name)[0])
        if name in ("start", "end", "cat", "present", "odd"):
            continue
        present_as = {"grid_y": "grid_x", "grid_z": "grid_x", "block_y": "block_x", "block_z": "block_x"}.get(name, name)
        row[name] = value if present >> kineto_native.FIELDS.index(present_as) & 1 else None
    row["cat"] = kineto_native.CATS[int(rows.col("cat")[0])] if rows.col("cat")[0] >= 0 else int(rows.col("cat")[0])
    row["name"] = rows.names[0].as_py()
    row["odd"] = ext.odd
    return row


def kernel(**over: Any) -> dict[str, Any]:
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2,
             "args": {"device": 0, "stream": 7, "correlation": 5}}
    event.update(over)
    return event


def import_both(files: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, native: bool = True,
                **kw: Any) -> tuple[Path, Path, Any, Any]:
    """Import with the native route (checking that it was, or with ``native`` false was
    not, taken for each file) and with msgspec (the filter on both times); return both
    runs and results."""
    a, b = tmp_path / "native", tmp_path / "msgspec"
    before = kineto_native.outcomes["native"]
    ra = import_kineto(files, a, **kw)
    assert kineto_native.outcomes["native"] - before == (len(files) if native else 0), dict(kineto_native.outcomes)
    monkeypatch.setattr(kineto_native, "ENABLED", False)
    rb = import_kineto(files, b, **kw)
    monkeypatch.setattr(kineto_native, "ENABLED", True)
    assert kineto_native.outcomes["native"] - before == (len(files) if native else 0)
    return a, b, ra, rb


def write(tmp_path: Path, events: list[dict[str, Any]] | list[str], head: str = '"schemaVersion": 1') -> Path:
    path = tmp_path / "t.json"
    path.write_text(trace_text(events, head))
    return path


# -- real traces -------------------------------------------------------------------------
@pytest.mark.parametrize("name", SHARED_NAMES)
def test_shared_traces_import_the_same_natively(shared_kineto: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                name: str) -> None:
    path = shared_kineto / f"{name}.json.gz"
    if not path.is_file():
        pytest.skip(f"{path.name} not present")
    assert_identical_runs(*import_both([path], tmp_path, monkeypatch), table_order=True)


def test_the_fixtures_are_found() -> None:
    assert len(KINETO_FIXTURES) >= 14


@pytest.mark.parametrize("path", KINETO_FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_fixtures_import_the_same_natively(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    assert_identical_runs(*import_both([path], tmp_path, monkeypatch), table_order=True)


@pytest.mark.parametrize("chunk", [3, 7, 16384])
def test_shared_trace_in_small_chunks(shared_kineto: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      chunk: int) -> None:
    """Rows joined per chunk from two categories (api, markers, steps, record_param_comms)
    come in the chunked route's order whatever the chunks."""
    path = shared_kineto / "nccl_parser_config_nccl_data.json.gz"
    if not path.is_file():
        pytest.skip(f"{path.name} not present")
    monkeypatch.setattr(decode, "CHUNK_EVENTS", chunk)
    assert_identical_runs(*import_both([path], tmp_path, monkeypatch), table_order=True)


def test_multi_rank_fixtures_import_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted((DATA / "scenarios" / "kineto").glob("straggler_rank*.json.gz"))
    assert len(files) >= 2
    assert_identical_runs(*import_both(files, tmp_path, monkeypatch), table_order=True)


# -- synthetic traces: every table, odd shapes, chunk boundaries ---------------------------
def rich_events(ts0: float, *, without_memset_args: bool = False) -> list[dict[str, Any]]:
    """Events of every kind the tables read, in an order that mixes categories."""
    def t(i: float) -> float | int:
        return round(ts0 + i, 3)

    ev: list[dict[str, Any]] = []
    for step in range(3):
        base = step * 100
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 7, "tid": 8, "ts": t(base),
             "dur": 90.5, "args": {"External id": 1}},
            {"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{step + 10}", "pid": 7, "tid": 8, "ts": t(base + 0.001),
             "dur": 90},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": t(base + 1), "dur": 5,
             "args": {"External id": 30 + step, "Input Dims": [[2, 3], []]}},
            {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 7, "tid": 8, "ts": t(base + 0.5),
             "dur": 40, "args": {"Python id": 3, "Python parent id": 1}},
            {"ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1102): _call_impl", "pid": 7,
             "tid": 8, "ts": t(base + 0.75), "dur": 20},
            {"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 7, "tid": 9, "ts": t(base + 1), "dur": 5},
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 7, "tid": 8, "ts": t(base + 2), "dur": 9,
             "args": {"External id": 40 + step, "Collective name": "allreduce", "dtype": "Float",
                      "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "Process Group Name": "0"}},
            {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 7, "tid": 9, "ts": t(base + 2.5),
             "dur": 1, "args": {"correlation": 100 + step, "cbid": 307}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8, "ts": t(base + 3),
             "dur": 1.25, "args": {"correlation": 100 + step, "cbid": 211, "External id": 40 + step}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0, "tid": 7,
             "ts": t(base + 4), "dur": 20.75, "args": {"device": 0, "stream": 7, "correlation": 100 + step,
                                                       "External id": 40 + step, "grid": [2, 1, 1],
                                                       "block": [640, 1, 1]}},
            {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllGather_RING_LL_Sum_int8_t", "pid": 0, "tid": 9,
             "ts": t(base + 30), "dur": 1, "args": {"correlation": 999}},  # launch unknown
            {"ph": "X", "cat": "user_annotation", "name": "record_param_comms", "pid": 7, "tid": 8, "ts": t(base + 31),
             "dur": 2, "args": {"Collective name": "broadcast", "dtype": "BFloat16", "In msg nelems": 8}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 7, "tid": 8, "ts": t(base + 32),
             "dur": 3, "args": {"correlation": 200 + step, "cbid": 41}},
            {"ph": "X", "cat": "gpu_memcpy", "name": ["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)",
                                                      "Memcpy DtoD", "memcpy weird"][step % 4],
             "pid": 0, "tid": 7, "ts": t(base + 33), "dur": 1, "args": {"bytes": 4096, "correlation": 200 + step}},
            {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": t(base + 34),
             "dur": 0.5, "args": {"device": 1, "bytes": 64, "correlation": 300 + step}},
            {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": t(base + 35), "dur": 4,
             "args": {"cuda_sync_kind": "Stream Synchronize", "correlation": 200 + step, "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": 0, "tid": 7, "ts": t(base + 36), "dur": 1,
             "args": {"correlation": 123456}},
            {"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": t(base + 37), "dur": 3},
            {"ph": "X", "cat": "user_annotation", "name": f"fwd{step}", "pid": 7, "ts": t(base + 38), "dur": 3,
             "args": None},
            {"ph": "X", "cat": "gpu_user_annotation", "name": "bwd", "pid": 1, "tid": 5, "ts": t(base + 39), "dur": 3,
             "args": {"device": 3, "stream": 11}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "ts": t(base + 40), "dur": 5,
             "args": {"correlation": 7, "grid": None, "registers per thread": 32, "shared memory": 0, "graph id": 4}},
            {"ph": "f", "cat": "ac2g", "name": "flow", "pid": 7, "tid": 8, "ts": t(base + 41), "id": 1},
            {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}},
            {"ph": "X", "name": "no category", "ts": t(base + 42), "dur": 1},
            {"ph": "X", "cat": None, "name": 5, "ts": "odd but ignored", "dur": 1},
        ]
    if without_memset_args:  # device and stream from pid and tid
        for e in ev:
            if e.get("cat") == "gpu_memset":
                del e["args"]
    return ev


@pytest.mark.parametrize("chunk", [2, 5, 16384])
@pytest.mark.parametrize("ts0", [4_458_676_983.183, 1_712_195_495_519_689.047], ids=["relative", "epoch"])
def test_every_table_is_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, ts0: float) -> None:
    monkeypatch.setattr(decode, "CHUNK_EVENTS", chunk)
    head = '"schemaVersion": 1' + (', "baseTimeNanoseconds": 1000000' if ts0 < 2**43 else "")
    path = write(tmp_path, rich_events(ts0, without_memset_args=ts0 >= 2**43), head)
    a, b, ra, rb = import_both([path], tmp_path, monkeypatch)
    assert_identical_runs(a, b, ra, rb, table_order=True)
    assert set(ra.rows[0]) == {"api", "kernels", "memcpy", "memset", "markers", "steps", "sync", "collectives", "operators"}
    assert ra.warnings  # unlinked NCCL kernels
    ops = open_run(a).table("operators")
    assert (ops["kind"] == "python_function").sum() == 6 and ops["call_site"].eq("train.py(12): step").sum() == 9


def test_an_empty_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, [])
    assert_identical_runs(*import_both([path], tmp_path, monkeypatch), table_order=True)
    path = write(tmp_path, [{"ph": "f", "cat": "ac2g", "name": "flow", "ts": 1}])
    assert_identical_runs(*import_both([path], tmp_path / "2", monkeypatch), table_order=True)


def test_repeated_correlation_ids_take_the_last_api_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch index keeps the last API call (in table order: per chunk, runtime then
    driver calls) of a correlation id, as the msgspec route's does."""
    events = [
        {"ph": "X", "cat": "cuda_driver", "name": "cuStreamSynchronize", "pid": 1, "tid": 30, "ts": 1, "dur": 1,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 10, "ts": 2, "dur": 1,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 20, "ts": 3, "dur": 1,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 4, "dur": 1,
         "args": {"correlation": 5}},
    ]
    path = write(tmp_path, events)
    a, b, ra, rb = import_both([path], tmp_path, monkeypatch)
    assert_identical_runs(a, b, ra, rb, table_order=True)
    assert pq.read_table(a / "sync" / "rank=0").column("tid").to_pylist() == [30]


# -- the extractor: values -----------------------------------------------------------------
@pytest.mark.parametrize(("text", "ns"), [
    ("123", 123_000), ("123.4", 123_400), ("123.456", 123_456), ("-5.5", -5_500), ("0", 0), ("-0", 0),
    ("0.001", 1), ("-0.001", -1), ("1712195495519689.047", 1_712_195_495_519_689_047),
    ("9223372036854775.807", 2**63 - 1), ("-9223372036854775.807", -(2**63 - 1)),
])
def test_timestamps_are_exact(text: str, ns: int) -> None:
    row = one(f'{{"ph": "X", "cat": "kernel", "name": "k", "ts": {text}, "dur": {text}}}')
    assert (row["ts"], row["dur"], row["odd"]) == (ns, ns, [])


@pytest.mark.parametrize("text", ["1e3", "1.5E2", "1.0e-3", "1.2345", "0.0000", "9223372036854775.808",
                                  "99999999999999999999", '"12"', "null", "true", "[1]", '{"a": 1}'])
def test_timestamps_not_exact_are_odd(text: str) -> None:
    assert one(f'{{"ph": "X", "cat": "kernel", "name": "k", "ts": {text}, "dur": 1}}')["odd"] == ["ts/dur not exact"]


@pytest.mark.parametrize("missing", ["ts", "dur"])
def test_missing_timestamps_are_odd(missing: str) -> None:
    event = kernel()
    del event[missing]
    assert one(event)["odd"] == ["ts/dur not exact"]


@given(st.integers(-(10**18), 10**18), st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_any_decimal_timestamp_is_exact(ns: int, decimals: int) -> None:
    ns -= ns % 10 ** (3 - decimals)
    text = format(Decimal(ns).scaleb(-3).quantize(Decimal(1).scaleb(-decimals)), "f")
    assert Decimal(text) * 1000 == ns
    row = one(f'{{"ph": "X", "cat": "kernel", "name": "k", "ts": {text}, "dur": 0}}')
    assert (row["ts"], row["odd"]) == (ns, [])


def test_values_and_defaults() -> None:
    row = one(kernel(args={"device": 3, "stream": -7, "correlation": 2**63 - 1, "registers per thread": 32,
                           "shared memory": 0, "graph id": None, "bytes": 12, "cbid": 211,
                           "grid": [4, 106, 1], "block": [128, 1, 1], "External id": 5, "other": [{"device": "x"}],
                           "Record function id": 1.5}))
    assert row == {"pid": 0, "tid": 7, "ts": 10_000, "dur": 2_000, "correlation": 2**63 - 1, "device": 3,
                   "stream": -7, "registers": 32, "shared_memory": 0, "graph_id": None, "bytes": 12, "cbid": 211,
                   "grid_x": 4, "grid_y": 106, "grid_z": 1, "block_x": 128, "block_y": 1, "block_z": 1,
                   "external_id": 5, "cat": "kernel", "name": "k", "odd": []}
    # Absent and null are the same: no value.
    for args in ({}, None, {"device": None, "grid": None}):
        row = one(kernel(pid=None, args=args))
        assert row["pid"] is None and row["device"] is None and row["grid_x"] is None and row["odd"] == []
    event = kernel()
    del event["args"], event["name"], event["tid"]
    row = one(event)
    assert (row["name"], row["tid"], row["correlation"], row["odd"]) == ("", None, None, [])


@pytest.mark.parametrize("name", [
    "plain", "", 'quote " and \\ backslash', "tab\tnew\nline\r\x08\x0c/", "é ü 漢字", "emoji 😀 𝄞",
    "\x00nul", "\u2028\u2029", "ProfilerStep#1",
])
@pytest.mark.parametrize("ascii_only", [True, False])
def test_names_are_unescaped(name: str, ascii_only: bool) -> None:
    text = json.dumps(name, ensure_ascii=ascii_only)
    row = one(f'{{"ph": "X", "cat": "kernel", "name": {text}, "ts": 1, "dur": 1}}')
    assert (row["name"], row["odd"]) == (name, [])


def test_surrogate_pairs_and_solidus_escapes() -> None:
    row = one('{"ph": "X", "cat": "kernel", "name": "\\ud83d\\ude00 \\uD834\\uDD1E \\/ \\u00e9", "ts": 1, "dur": 1}')
    assert row["name"] == "😀 𝄞 / é"


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_any_name_is_unescaped(name: str) -> None:
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in name):
        return  # lone surrogates are not UTF-8: the filter refuses them
    for ascii_only in (True, False):
        text = json.dumps(name, ensure_ascii=ascii_only)
        assert one(f'{{"ph": "X", "cat": "kernel", "name": {text}, "ts": 1, "dur": 1}}')["name"] == name


def test_categories() -> None:
    assert one(kernel(cat="cuda_runtime"))["cat"] == "cuda_runtime"
    assert one(kernel(cat=None))["cat"] == -1
    assert one('{"ph": "X", "name": "k", "ts": 1, "dur": 1}')["cat"] == -1
    # (The filter drops such events; the extractor reads them all the same.)
    ext = kineto_native.extract(trace_text(['{"ph": "X", "cat": "Trace", "name": 5}']).encode(), 1)
    assert int(ext.rows.col("cat")[0]) == -2 and ext.odd_rows == 0


# -- the extractor: what sends a text to msgspec --------------------------------------------
@pytest.mark.parametrize(("event", "odd"), [
    ('{"ph": "X", "cat": "k\\u0065rnel", "name": "k", "ts": 1, "dur": 1}', "cat not plain text"),
    ('{"ph": "X", "cat": 7, "name": "k", "ts": 1, "dur": 1}', "cat not plain text"),
    ('{"ph": "X", "cat": "kernel", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}', "cat not plain text"),
    ('{"ph": "X", "c\\u0061t": "kernel", "name": "k", "ts": 1, "dur": 1}', "escaped key"),
    ('{"ph": "X", "cat": "kernel", "n\\u0061me": "k", "ts": 1, "dur": 1}', "escaped key"),
    ('{"cat": "kernel", "name": "k", "ts": 1, "dur": 1}', "ph not X"),
    ('{"ph": "\\u0058", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}', "ph not X"),
    ('{"ph": "X", "ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}', "ph not X"),
    ('{"ph": "X", "cat": "kernel", "name": null, "ts": 1, "dur": 1}', "name not text"),
    ('{"ph": "X", "cat": "kernel", "name": 5, "ts": 1, "dur": 1}', "name not text"),
    ('{"ph": "X", "cat": "kernel", "name": "a", "name": "b", "ts": 1, "dur": 1}', "name not text"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": "7", "ts": 1, "dur": 1}', "pid/tid not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "tid": 7.0, "ts": 1, "dur": 1}', "pid/tid not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "pid": 1, "ts": 1, "dur": 1}', "pid/tid not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 9223372036854775808, "ts": 1, "dur": 1}', "pid/tid not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "tid": true, "ts": 1, "dur": 1}', "pid/tid not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "ts": 1, "dur": 1}', "ts/dur not exact"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": [1]}', "args not an object"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {}, "args": {}}', "args not an object"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"correlation": 1.0}}', "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"device": "0"}}', "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"bytes": 1e3}}', "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"stream": 99999999999999999999}}',
     "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"grid": [1, 2]}}', "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"grid": [1, 2, 3, 4]}}', "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"block": [1, 2.5, 3]}}', "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"block": "1,1,1"}}', "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"cbid": 1, "cbid": 1}}', "args value not an int"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"c\\u006frrelation": 1}}', "escaped args key"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"ps": null}}', "args.ps"),
    ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"ps": {"tid": 1}}}', "args.ps"),
])
def test_odd_events_send_the_trace_to_msgspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, event: str,
                                               odd: str) -> None:
    """The extractor names what is odd, and the import takes the msgspec route, with the
    msgspec route's result."""
    assert one(event)["odd"] == [odd]
    ordinary = '{"ph": "X", "cat": "kernel", "name": "fine", "pid": 0, "tid": 7, "ts": 1, "dur": 1}'
    path = write(tmp_path, [ordinary, event])
    before = kineto_native.outcomes.copy()
    if "99999" in event or "9223372036854775808" in event:
        # Beyond int64: the msgspec route cannot store it either, and says so (naming the
        # event and the field: issue 20).
        with pytest.raises(InputError, match=r"traceEvents\[1\]\S*: .*out of range"):
            import_kineto(path, tmp_path / "run")
    else:
        assert_identical_runs(*import_both([path], tmp_path, monkeypatch, native=False), table_order=True)
    refused = kineto_native.outcomes - before
    assert list(refused) == [f"refused: {odd}"]


def test_odd_values_of_events_no_table_reads_do_not_matter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept events of no known category (no cat, null, text the tables do not read) are
    read by nobody: only what could give them a category is odd."""
    events = [
        '{"ph": "X", "name": 5, "pid": "x", "ts": 1e3, "args": [1]}',
        '{"cat": null, "name": null, "ts": null, "args": {"ps": 1, "correlation": 1.5}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}',
    ]
    ext = extract(trace_text(events))
    assert ext.rows is not None and ext.odd_rows == 0 and len(ext.rows) == 3
    assert_identical_runs(*import_both([write(tmp_path, events)], tmp_path, monkeypatch), table_order=True)
    assert extract(trace_text(['{"ph": "X", "c\\u0061t": "x"}'])).odd == ["escaped key"]


def test_perfscope_categories_and_exports_take_msgspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    metric = '{"ph": "C", "cat": "perfscope_metric", "name": "sm", "pid": 0, "ts": 1, "args": {"value": 3}}'
    host = '{"ph": "X", "cat": "perfscope_host", "name": "h", "pid": 0, "tid": 1, "ts": 1, "dur": 1}'
    for i, events in enumerate(([metric], [host])):
        path = write(tmp_path, [kernel(), events[0]])
        assert_identical_runs(*import_both([path], tmp_path / str(i), monkeypatch, native=False), table_order=True)
    before = kineto_native.outcomes["refused: perfscope export"]
    head = '"schemaVersion": 1, "perfscope": {"ranks": [{"rank": 3, "pids": []}]}'
    assert_identical_runs(*import_both([write(tmp_path, [kernel()], head)], tmp_path / "e", monkeypatch, native=False), table_order=True)
    assert kineto_native.outcomes["refused: perfscope export"] == before + 1


def test_traces_without_a_kineto_header_get_the_same_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Kineto's header keys only the original's first events (dropped ones
    included) say whether it is a Kineto trace: the original is decoded."""
    path = write(tmp_path, [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1}, kernel()], head="")
    before = kineto_native.outcomes["refused: no Kineto header"]
    assert_identical_runs(*import_both([path], tmp_path, monkeypatch, native=False), table_order=True)
    assert kineto_native.outcomes["refused: no Kineto header"] == before + 1


# -- the extractor: shapes, limits, switches ----------------------------------------------
def test_rows_must_match_the_count() -> None:
    text = trace_text([kernel(), kernel()]).encode()
    kept = prefilter.run(text, FILTER_RULES)
    assert kineto_native.extract(kept.text, 2).error is None
    assert kineto_native.extract(kept.text, 1).error == "rows"
    assert kineto_native.extract(kept.text, 3).error == "rows"


@pytest.mark.parametrize("text", [
    b"", b"[]", b"{", b'{"traceEvents": 3}', b'{"traceEvents": [1]}', b'{"traceEvents": [{"ph": "X", "cat": "k',
    b'{"traceEvents": [{"ph": "X"}', b'{"a": [1, 2}, "traceEvents": []}', b'{"traceEvents": [{"name": "\\u12',
    b'{"traceEvents": [{"name": "\\ud800 "}]}', b'{"traceEvents": [{"args": {"grid": [1, 2,', b"{" * 500,
])
def test_any_text_is_read_safely(text: bytes) -> None:
    """Texts the filter would refuse never reach the extractor, but it must not read past
    them or crash: it says the shape is wrong, or reads what is there."""
    for count in (0, 1, 2):
        ext = kineto_native.extract(text, count)
        assert ext.error in (None, "shape", "rows")


def test_the_root_members_come_from_msgspec() -> None:
    head = ('"schemaVersion": 1, "baseTimeNanoseconds": 1000, "distributedInfo": {"rank": 2, "world_size": 4}, '
            '"deviceProperties": [{"id": 0, "name": "H200"}], "traceName": "t", "host_name": "h", "x": 1.25')
    text = ("{" + head + ', "traceEvents": [' + json.dumps(kernel()) + '], "tail": "\\u00e9"}').encode()
    kept = prefilter.run(text, FILTER_RULES)
    trace = kineto_native.decode(kept)
    whole = decode.decode_trace(text, Path("t"))
    assert isinstance(trace.traceEvents, kineto_native.Rows) and len(trace.traceEvents) == 1
    for key in ("schemaVersion", "baseTimeNanoseconds", "distributedInfo", "deviceProperties", "traceName",
                "host_name", "perfscope"):
        assert getattr(trace, key) == getattr(whole, key), key


def test_switches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, [kernel()])
    before = kineto_native.outcomes["native"]
    monkeypatch.setenv("PERFSCOPE_KINETO_NATIVE", "0")
    assert not kineto_native.available()
    import_kineto(path, tmp_path / "a")
    assert kineto_native.outcomes["native"] == before
    monkeypatch.delenv("PERFSCOPE_KINETO_NATIVE")
    import_kineto(path, tmp_path / "b")
    assert kineto_native.outcomes["native"] == before + 1
    # A library built before the extractor existed (or with other columns) is not used.
    monkeypatch.setattr(kineto_native, "FIELDS", (*kineto_native.FIELDS, "more"))
    monkeypatch.setattr(kineto_native, "_lib", None)
    monkeypatch.setattr(kineto_native, "_load_failed", False)
    assert not kineto_native.available()
    result = import_kineto(path, tmp_path / "c")
    assert result.total("kernels") == 1 and kineto_native.outcomes["native"] == before + 1
    monkeypatch.setattr(kineto_native, "_load_failed", False)  # (monkeypatch restores _lib)


def test_no_pandas(tmp_path: Path) -> None:
    """The native route builds its columns without pyarrow's pandas-importing paths."""
    import subprocess
    import sys

    code = ("import sys; from perfscope.store.kineto import import_kineto, native as kineto_native; "
            f"import_kineto({str(write(tmp_path, rich_events(1.0)))!r}, {str(tmp_path / 'r')!r}); "
            "assert kineto_native.outcomes['native'] == 1, kineto_native.outcomes; "
            "assert 'pandas' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
