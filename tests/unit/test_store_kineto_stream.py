"""Filtering gzip traces while they are inflated (``prefilter.Stream``).

A streamed text must give :func:`perfscope.store.prefilter.run`'s result on the whole
text (filtered text, counts, chunk counts, error and its offset) and the extractor's rows
(:func:`perfscope.store.native.extract`'s) whatever the pieces it arrives in: every
scan that runs into the end of what has been written is retried once more is there.  So
the tests write texts in pieces of 1 and 7 bytes, let the filter see them a byte (or 7) at
a time (the ``step`` hook: every cut of the text is met), have the writing thread take over
part of the filtering (``help_bytes``) and of the extraction (``share_rows``), and check
that imports with streams are those without, errors included.
"""
from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfscope.errors import InputError
from kineto_checks import KINETO_FIXTURES, SHARED_NAMES, assert_identical_runs
from perfscope.store.kineto import import_kineto, native, prefilter, read
from perfscope.store.kineto.classify import FILTER_RULES
from perfscope.store.kineto.decode import CHUNK_EVENTS


def _built() -> str | None:
    """Build the library in place when the install did not; the reason when it cannot be."""
    if not (prefilter.available() and native.available()):
        try:
            from perfscope.store.kineto import build

            build.build_in_place()
        except Exception as e:  # noqa: BLE001 - no compiler: nothing to test
            return f"the Kineto filter is not built and cannot be: {e}"
        prefilter._load_failed = False
        native._load_failed = False
    if not prefilter.streaming():
        return "streams are not available here (one CPU, or a library without them)"
    return None


_NOT_BUILT = _built()
if _NOT_BUILT is not None:  # pragma: no cover - the build is part of the install
    pytest.skip(_NOT_BUILT, allow_module_level=True)

DATA = Path(__file__).resolve().parents[1] / "data"


# -- helpers -----------------------------------------------------------------------------
def whole(data: bytes) -> tuple[prefilter.Filtered, native.Extracted | None]:
    """The filter on the whole text (one thread, its own buffer) and the extractor on its result."""
    kept = prefilter.run(data, FILTER_RULES, chunk_events=CHUNK_EVENTS, threads=1)
    return kept, (native.extract(kept.text, kept.kept) if kept.text is not None else None)


def streamed(data: bytes, *, piece: int = 1 << 18, step: int = 0, help_bytes: int = 0, share_rows: int = 0,
             size: int | None = None, complete: bool = True,
             chunk_events: int = CHUNK_EVENTS) -> tuple[prefilter.Filtered, native.Sink]:
    """The streamed filter on ``data`` written ``piece`` bytes at a time."""
    sink = native.Sink(len(data) if size is None else size)
    stream = prefilter.Stream(len(data) if size is None else size, FILTER_RULES, chunk_events=chunk_events,
                                  sink=sink, step=step, help_bytes=help_bytes, share_rows=share_rows)
    assert stream.started
    try:
        for i in range(0, len(data), piece):
            if not stream.write(data[i:i + piece]):
                break
    finally:
        kept = stream.finish(complete)
    return kept, sink


def assert_same(data: bytes, **kw: Any) -> prefilter.Filtered:
    """The streamed result is the whole text's: filter result and, when it took the text,
    every row the extractor makes of it."""
    ref, ext = whole(data)
    got, sink = streamed(data, **kw)
    assert (got.error, got.offset, got.events) == (ref.error, ref.offset, ref.events), kw
    if ref.error is not None:
        # (kept counts the events kept before the error: as with run's two threads, not
        # those of a second job that did not get its events copied)
        assert got.text is None
        return got
    assert got.kept == ref.kept
    assert bytes(got.text) == bytes(ref.text)
    assert (got.chunk_kept, got.chunk_counts) == (ref.chunk_kept, ref.chunk_counts)
    rows = sink.extracted(got.text, got.kept)
    assert ext is not None
    if ext.rows is None:
        assert rows is None
        return got
    assert rows is not None and rows.rows is not None, kw
    assert np.array_equal(rows.rows.cols, ext.rows.cols)
    assert rows.rows.names.equals(ext.rows.names)
    assert (rows.events, rows.odd_rows, rows.first_odd, rows.odd) == (ext.events, ext.odd_rows, ext.first_odd, ext.odd)
    return got


def trace(*events: str, head: str = '"schemaVersion": 1', tail: str = "") -> str:
    """A trace text with these event texts."""
    parts = [head, '"traceEvents": [' + ", ".join(events) + "]", tail]
    return "{" + ", ".join(p for p in parts if p) + "}"


def big_trace(n: int) -> bytes:
    """A pretty-printed Kineto-like trace of n events, half of them kept, with escapes,
    non-ASCII names and exact timestamps."""
    events = []
    for i in range(n):
        if i % 4 == 0:
            events.append(f'{{"ph": "X", "cat": "kernel", "name": "k\\u00e9{i} \\"x\\"", "pid": 0, "tid": 7,\n'
                          f'    "ts": 1712195495519{i:03d}.047, "dur": 1.5,\n'
                          f'    "args": {{"correlation": {i}, "device": 0, "stream": 7, "grid": [1, 2, 3]}}}}')
        elif i % 4 == 1:
            events.append(f'{{\n    "ph": "X", "cat": "cpu_op", "name": "aten::op{i} ✓", "pid": 1, "tid": 2,\n'
                          f'    "ts": {i}, "dur": 0.5,\n    "args": {{"External id": 7, "Input Dims": [[1, 2], []]}}\n  }}')
        elif i % 4 == 2:
            events.append(f'{{"ph": "f", "id": {i}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}')
        else:
            events.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,'
                          f' "ts": {i}.25, "dur": 2, "args": {{"correlation": {i}, "cbid": 211}}}}')
    return ('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H200"}],\n "traceEvents": [\n  '
            + ",\n  ".join(events) + '\n], "traceName": "t\\u00e9", "baseTimeNanoseconds": 1700000000000000000}\n').encode()


# -- texts -----------------------------------------------------------------------------
EVENT = '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "args": {"a": [1, 2.5e-3, "x"]}}'
KEPT = '{"ph": "X", "cat": "kernel", "name": "k\\u00e9", "pid": 0, "tid": 1, "ts": 1.5, "dur": 2, "args": {"grid": [1, 2, 3]}}'

#: Texts the filter takes or refuses, cut anywhere by the tests: the verdict and its
#: offset must not depend on where the text's end was while it came.
TEXTS = [
    trace(KEPT, EVENT, KEPT),
    trace(),
    trace(KEPT, head="", tail='"b": [1, {"c": null}], "d": "\\ud83d\\ude80"'),
    trace('{"ph": "X", "cat": "kernel", "name": "k€rnel 🚀 \\ud83d\\ude80"}', '{"ph": "X", "cat": "cpu_op", "name": "ünïcode"}'),
    " \n" + trace(KEPT, '{"ph": "f", "cat": "ac2g"}', head='"x": {"traceEvents": 5}', tail='"y": [1.5e3, -0, true]') + "\n",
    trace('{"ph": "X", "cat": "kernel", "a": ' + "1" * 601 + ".5}"),  # an integer part of 601 digits: not an int
    trace('{"ph": "X", "cat": "kernel", "a": -' + "7" * 600 + "}"),
    # refused
    "",
    "[1, 2]",
    "{}",
    '{"traceEvents": null}',
    '{"traceEvents": [], "traceEvents": []}',
    '{"trace\\u0045vents": []}',
    '{"traceEvents": [1]}',
    '{"traceEvents": [{"ph": 5}]}',
    '{"traceEvents": [{"ph": "f", "cat": {}}]}',
    '{"traceEvents": [' + EVENT,
    '{"traceEvents": [' + EVENT + "]",
    '{"traceEvents": [' + EVENT + ",]}",
    '{"traceEvents": [' + EVENT + " " + EVENT + "]}",
    '{"traceEvents": []} x',
    '{"traceEvents": [{"ph": "f", "a": 01}]}',
    '{"traceEvents": [{"ph": "f", "a": 1.}]}',
    '{"traceEvents": [{"ph": "f", "a": 1e}]}',
    '{"traceEvents": [{"ph": "f", "a": tru}]}',
    '{"traceEvents": [{"ph": "f", "a": "\\u12g4"}]}',
    '{"traceEvents": [{"ph": "f", "a": "new\nline"}]}',
    '{"traceEvents": [{"ph": "f", "a": "\\ud800"}]}',
    '{"traceEvents": [{"ph": "f", "a": "\\ud800\\u0041"}]}',
    '{"traceEvents": [{"ph": "f", "a": ' + "7" * 601 + "}]}",
    '{"traceEvents": [{"ph": "f", "a": ' + "[" * 99 + "]" * 99 + "}]}",
]
RAW_TEXTS = [
    b'{"traceEvents": [{"ph": "f", "a": "\xff"}]}',
    b'{"traceEvents": [{"ph": "f", "a": "\xe2\x82"}]}',  # cut short: the next byte decides
    b'{"traceEvents": [{"ph": "f", "a": "\xe2\x82\xac\xf0\x9f\x9a\x80"}]}',  # whole: fine
    b'{"traceEvents": [{"ph": "f", "a": "\xf4\x90\x80\x80"}]}',
    b'{"traceEvents": [{"ph": "f", "a": "\xe2\x82',
]
ALL_TEXTS = [t.encode() for t in TEXTS] + RAW_TEXTS


@pytest.mark.parametrize("text", ALL_TEXTS, ids=range(len(ALL_TEXTS)))
@pytest.mark.parametrize(("piece", "step"), [(1, 0), (7, 0), (1 << 18, 1), (1 << 18, 7), (3, 2)])
def test_every_cut_gives_the_whole_texts_verdict(text: bytes, piece: int, step: int) -> None:
    assert_same(text, piece=piece, step=step, help_bytes=1, share_rows=1)


@pytest.mark.parametrize(("piece", "step", "help_bytes", "share_rows"),
                         [(1, 0, 0, 0), (7, 0, 1, 1), (1 << 20, 1, 1, 1), (1 << 20, 7, 1, 2), (4093, 0, 1, 50),
                          (1 << 20, 0, 1, 1)])
def test_a_trace_written_and_read_in_every_way(piece: int, step: int, help_bytes: int, share_rows: int) -> None:
    assert_same(big_trace(400), piece=piece, step=step, help_bytes=help_bytes, share_rows=share_rows)


def test_the_writers_thread_takes_over_part_of_the_filtering() -> None:
    """Written at once and read a byte at a time, the filter is far behind when the text
    is whole: the writer's thread filters the second part of the rest (a second job), and
    its kept events are copied after the filter's."""
    got = assert_same(big_trace(1000), piece=1 << 24, step=1, help_bytes=1, share_rows=1)
    assert got.split


def test_the_writers_help_never_races_the_filter() -> None:
    """The filter writes kept events over the text it has read while the writer's thread
    offers help: the writer once looked for its split element in text being written over
    (a data race TSan saw in 3 of 8 runs).  Now only the filter reads there; this runs
    under TSan in ``test_native_sanitizers.py``."""
    data = big_trace(1000)
    for piece in (1 << 16, 1 << 12, 1 << 20, 1 << 14, 1 << 16, 1 << 18, 1 << 13, 1 << 24):
        assert_same(data, piece=piece, step=0, help_bytes=1, share_rows=1)


def test_errors_in_the_writers_part_are_found() -> None:
    data = big_trace(1000)
    for at in (len(data) // 3, 9 * len(data) // 10):
        i = data.index(b'"ph": "f"', at)
        bad = data[:i] + b'"ph": 5  ' + data[i + 9:]
        got = assert_same(bad, piece=1 << 24, step=1, help_bytes=1, share_rows=1)
        assert (got.error, got.offset) == ("shape", i + 6)


def test_wrong_split_guesses_are_caught() -> None:
    """The writer's thread guesses where an element starts (after ", {"): inside args,
    the guess is wrong, which the filter must notice (and then go on alone)."""
    inner = ", ".join('{"ph": "f", "cat": "ac2g"}' for _ in range(20000))
    text = ('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "args": {"x": [' + inner
            + ']}}, {"ph": "X", "cat": "Trace", "name": "n"}, {"ph": "X", "cat": "kernel"}]}').encode()
    for step in (0, 64, 4093):
        got = assert_same(text, piece=1 << 24, step=step, help_bytes=1, share_rows=1)
        assert (got.events, got.kept) == (3, 2)


@pytest.mark.parametrize("path", KINETO_FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_fixtures_stream_the_same(path: Path) -> None:
    data = path.read_bytes()
    data = gzip.decompress(data) if path.suffix == ".gz" else data
    for piece, step, help_bytes, share_rows in [(7, 0, 1, 1), (1 << 24, 1, 1, 1), (1 << 24, 7, 1, 100)]:
        assert_same(data, piece=piece, step=step, help_bytes=help_bytes, share_rows=share_rows)


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_shared_traces_stream_the_same(shared_kineto: Path, name: str) -> None:
    path = shared_kineto / f"{name}.json.gz"
    if not path.is_file():
        pytest.skip(f"{path.name} not present")
    data = gzip.decompress(path.read_bytes())
    assert_same(data)  # (the defaults: how the importer streams)
    assert_same(data, piece=4093, step=4093 if len(data) > 2 << 20 else 7, help_bytes=1, share_rows=1)


def test_a_text_that_does_not_come_whole_is_refused() -> None:
    data = big_trace(200)
    for size, complete in [(len(data), False), (len(data) + 10, True), (len(data) - 10, True)]:
        got, _ = streamed(data, piece=1000, size=size, complete=complete, help_bytes=1, share_rows=1)
        assert (got.error, got.text) == ("input", None)


def test_too_few_rows_leave_the_extraction_to_the_importer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sink with room for fewer rows than the events kept says so, and the rows are
    extracted from the filtered text instead (with the same tables)."""
    monkeypatch.setattr(native, "SINK_BYTES_PER_ROW", 1 << 30)
    data = big_trace(400)
    for share_rows in (0, 1):
        got, sink = streamed(data, help_bytes=1, share_rows=share_rows)
        assert got.error is None and got.kept > sink.capacity
        assert sink.code != 0 and sink.extracted(got.text, got.kept) is None


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="chunk_events"):
        prefilter.Stream(10, FILTER_RULES, chunk_events=0)
    with pytest.raises(ValueError, match="rules"):
        prefilter.Stream(10, prefilter.Rules({"a\nb": "X"}, "cpu_op", ("x",)))


# -- imports -----------------------------------------------------------------------------
def counting_streams(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record each Stream the importer finishes (whether its text came whole)."""
    used: list[bool] = []
    real = prefilter.Stream.finish

    def finish(self: prefilter.Stream, complete: bool) -> prefilter.Filtered:
        used.append(complete)
        return real(self, complete)

    monkeypatch.setattr(prefilter.Stream, "finish", finish)
    return used


def outcome(path: Path, out: Path) -> str:
    """An import's result or error, as text."""
    try:
        result = import_kineto(path, out)
    except (InputError, RecursionError) as e:
        return f"{type(e).__name__}: {e}"
    return f"ok {result.rows} {result.warnings}"


def small_streams(monkeypatch: pytest.MonkeyPatch, *, piece: int = 7, step: int = 0) -> None:
    """Stream even small files, in tiny pieces."""
    monkeypatch.setattr(read, "_STREAM_BYTES", 1)
    monkeypatch.setattr(read, "_STREAM_PIECE", piece)
    monkeypatch.setattr(read, "_STREAM_STEP", step)


GZIP_FIXTURES = [p for p in KINETO_FIXTURES if p.suffix == ".gz"]


@pytest.mark.parametrize("path", GZIP_FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
@pytest.mark.parametrize(("piece", "step"), [(7, 0), (1 << 18, 1)])
def test_fixtures_import_the_same_with_and_without_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           path: Path, piece: int, step: int) -> None:
    small_streams(monkeypatch, piece=piece, step=step)
    used = counting_streams(monkeypatch)
    ra = import_kineto(path, tmp_path / "a")
    assert used == [True]
    monkeypatch.setattr(prefilter, "STREAM", False)
    rb = import_kineto(path, tmp_path / "b")
    assert used == [True]
    assert_identical_runs(tmp_path / "a", tmp_path / "b", ra, rb)


@pytest.mark.parametrize("name", ["ns_resolution_trace_rank-0", "trace_filter_sampled_rank-0"])
def test_shared_traces_import_the_same_with_and_without_streams(shared_kineto: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    path = shared_kineto / f"{name}.json.gz"
    if not path.is_file():
        pytest.skip(f"{path.name} not present")
    used = counting_streams(monkeypatch)
    before = native.outcomes["native"]
    ra = import_kineto(path, tmp_path / "a")
    assert used == [True] and native.outcomes["native"] == before + 1
    monkeypatch.setenv("PERFSCOPE_KINETO_STREAM", "0")
    rb = import_kineto(path, tmp_path / "b")
    assert used == [True]
    assert_identical_runs(tmp_path / "a", tmp_path / "b", ra, rb)


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}, ',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]} trailing',
        '[{"ph": "X"}]',
        '{"schemaVersion": 1, "traceEvents": [{"ph": "f", "cat": "ac2g"}, {"ph": 5, "cat": "kernel"}]}',
        '{"schemaVersion": 1, "traceEvents": [{"ph": "f", "cat": "ac2g", "a": "\\ud800"}]}',
        # No Kineto header key: only the first events' categories say whether it is Kineto.
        '{"traceEvents": [{"ph": "X", "cat": "my_app", "name": "x", "ts": 1, "dur": 1}]}',
        '{"traceEvents": [{"ph": "f", "cat": "my_app"}, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]}',
        # Odd for the extractor: the msgspec route.
        '{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0001, "dur": 1}]}',
    ],
)
def test_errors_read_the_same_with_and_without_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """The stream overwrites the text as it filters it: a refused one is inflated again
    from the compressed bytes, and decoded whole as without streams."""
    small_streams(monkeypatch, piece=5)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    used = counting_streams(monkeypatch)
    streamed_outcome = outcome(path, tmp_path / "a")
    assert len(used) == 1
    monkeypatch.setattr(prefilter, "STREAM", False)
    assert streamed_outcome == outcome(path, tmp_path / "b")
    monkeypatch.setattr(prefilter, "ENABLED", False)
    assert streamed_outcome == outcome(path, tmp_path / "c")


def gzip_variants(data: bytes) -> dict[str, bytes]:
    """gzip files the stream must not take as they are: today's reading decides."""
    z = gzip.compress(data)
    half = len(data) // 2
    return {
        "two members": gzip.compress(data[:half]) + gzip.compress(data[half:]),
        "same-size members": gzip.compress(data) + gzip.compress(b" " * len(data)),
        "truncated": z[:-10],
        "cut in the middle": z[:len(z) // 2],
        "bad checksum": z[:-8] + bytes([z[-8] ^ 1]) + z[-7:],
        "bad length": z[:-4] + bytes([z[-4] ^ 1]) + z[-3:],
        "trailing bytes": z + b"\x00\x01",
        "empty member after": z + gzip.compress(b""),
    }


@pytest.mark.parametrize("variant", list(gzip_variants(b"x")))
def test_gzip_files_the_stream_cannot_take_read_as_without_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     variant: str) -> None:
    data = gzip.decompress((DATA / "kineto" / "ddp_rank0.json.gz").read_bytes())
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip_variants(data)[variant])
    small_streams(monkeypatch, piece=4096)
    used = counting_streams(monkeypatch)
    streamed_outcome = outcome(path, tmp_path / "a")
    # Tried (unless the trailer says 0 bytes), and the text did not come whole.
    assert used == ([] if variant == "empty member after" else [False]), variant
    monkeypatch.setattr(prefilter, "STREAM", False)
    assert streamed_outcome == outcome(path, tmp_path / "b")


def test_a_gzip_pipe_is_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compressed bytes are kept until the import is done, so a pipe (read once) is
    streamed like a file, and a refused one inflated again from them."""
    small_streams(monkeypatch, piece=1 << 12)
    used = counting_streams(monkeypatch)
    source = DATA / "kineto" / "ddp_rank0.json.gz"
    bad = gzip.compress(gzip.decompress(source.read_bytes())[:-3000])
    results = []
    for payload in (source.read_bytes(), bad):
        fifo = tmp_path / f"trace{len(results)}.fifo"
        os.mkfifo(fifo)

        def feed(path: Path = fifo, data: bytes = payload) -> None:
            with open(path, "wb") as f:
                f.write(data)

        writer = threading.Thread(target=feed)
        writer.start()
        try:
            results.append(outcome(fifo, tmp_path / f"run{len(results)}"))
        finally:
            writer.join()
    assert used == [True, True]
    assert results[0] == outcome(source, tmp_path / "file")
    assert results[1].startswith("InputError: ") and "not valid JSON" in results[1]


def test_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert prefilter.streaming()
    monkeypatch.setenv("PERFSCOPE_KINETO_STREAM", "0")
    assert not prefilter.streaming()
    monkeypatch.delenv("PERFSCOPE_KINETO_STREAM")
    monkeypatch.setattr(prefilter, "STREAM", False)
    assert not prefilter.streaming()
    monkeypatch.setattr(prefilter, "STREAM", True)
    monkeypatch.setattr(prefilter, "_threads", lambda: 1)
    assert not prefilter.streaming()  # (on one CPU the two threads would only take turns)
