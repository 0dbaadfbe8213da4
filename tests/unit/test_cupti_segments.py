"""Segment files: written by the native sink's own writer (no CUPTI: records fed with
ps_feed_plain), read and decoded out of process (segments.py, decoder.py)."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from perfscope.collectors.cupti import cbids, decoder, layouts, segments
from tests.unit.test_cupti_sink import _api, _kernel, sink  # noqa: F401 - the module's sink fixture

LAUNCH = next(k for k, v in cbids.RUNTIME.items() if v == "cudaLaunchKernel")
OFFSET = 7


class Tables:
    """A writer that keeps what it is given, by table."""

    def __init__(self) -> None:
        self.tables: dict[str, list[pa.Table]] = {}

    def append(self, table: str, batch: pa.Table) -> None:
        self.tables.setdefault(table, []).append(batch)

    def rows(self, table: str) -> pa.Table:
        return pa.concat_tables(self.tables[table])


@pytest.fixture
def writing(sink, tmp_path: Path):  # noqa: F811
    """The sink writing segments (no thread) into ``run/raw/rank0`` of a new run; closed afterwards."""
    from perfscope.store import create_run

    create_run(tmp_path / "run", source="profile")
    folder = segments.rank_folder(tmp_path / "run", 0)
    folder.mkdir(parents=True)
    sink.reset()
    sink.configure([layouts.KIND_CONCURRENT_KERNEL, layouts.KIND_RUNTIME])
    sink.set_api_filter(cbids.RUNTIME, cbids.DRIVER)
    sink.segments_open(folder, OFFSET, 0, 1 << 20)
    yield sink, folder
    sink.segments_close()


def _feed(sink, names: list[bytes], start: int) -> None:  # noqa: F811
    bufs = [ctypes.create_string_buffer(n) for n in names]
    recs = [_kernel(ctypes.addressof(b), start + 1000 * i, start + i) for i, b in enumerate(bufs)]
    recs += [_api(layouts.KIND_RUNTIME, LAUNCH, start + i) for i in range(len(bufs))]
    sink.feed_plain(b"".join(r.tobytes() for r in recs))


def test_the_sinks_segments_decode_into_tables(writing) -> None:
    sink, folder = writing
    _feed(sink, [b"_Z6kernelPf", b"other"], 10_000)
    sink.segments_cycle()
    _feed(sink, [b"_Z6kernelPf", b"third"], 20_000)
    sink.segments_cycle()
    sink.segments_cycle()  # nothing new: no file
    found, tmps = segments.list_segments(folder)
    assert [s.seq - found[0].seq for s in found] == [0, 1] and not tmps
    header, blocks = segments.read_segment(found[0].path)
    assert (header.pid, header.clock_offset_ns, header.layout_version) == (os.getpid(), OFFSET, layouts.CUPTI_API_VERSION)
    kinds = [b.kind for b in blocks]
    assert kinds[0] == segments.KIND_STRINGS and {layouts.KIND_CONCURRENT_KERNEL, layouts.KIND_RUNTIME} <= set(kinds)
    out = Tables()
    dec = decoder.RankDecoder(folder.parents[1], 0, writer=out)
    assert dec.decode_pending() == 2
    kern = out.rows("kernels")
    assert kern.column("name").to_pylist() == ["kernel(float*)", "other", "kernel(float*)", "third"]
    assert kern.column("start_ns").to_pylist() == [10_000 + OFFSET, 11_000 + OFFSET, 20_000 + OFFSET, 21_000 + OFFSET]
    assert out.rows("api").num_rows == 4
    assert dec.stats()["records"] == {"kernel": 4, "runtime": 4}
    assert all(s.decoded for s in segments.list_segments(folder)[0])
    assert dec.decode_pending() == 0  # decoded once
    # a new decoder (perfscope recover) reads names from the decoded segments, decodes nothing again
    again = decoder.RankDecoder(folder.parents[1], 0, writer=Tables())
    _feed(sink, [b"third"], 30_000)
    sink.segments_cycle()
    assert again.decode_pending() == 1
    assert again._writer.rows("kernels").column("name").to_pylist() == ["third"]  # type: ignore[union-attr]


def test_a_truncated_segment_is_left_out_with_a_warning(writing) -> None:
    sink, folder = writing
    _feed(sink, [b"a"], 1_000)
    sink.segments_cycle()
    _feed(sink, [b"b"], 2_000)
    sink.segments_cycle()
    last = segments.list_segments(folder)[0][-1].path
    last.write_bytes(last.read_bytes()[:-100])
    out = Tables()
    dec = decoder.RankDecoder(folder.parents[1], 0, writer=out)
    assert dec.decode_pending() == 1
    assert out.rows("kernels").column("name").to_pylist() == ["a"]
    assert dec.damaged == 1 and "truncated" in dec.warnings[0], dec.warnings
    assert (folder / (last.name + segments.DAMAGED)).exists()


def test_an_unfinished_segment_waits_while_following_and_is_given_up_at_the_end(writing, tmp_path: Path) -> None:
    _sink, folder = writing
    tmp = folder / ".99-00000000.cupti.tmp"
    tmp.write_bytes(b"PSCUPTI\0" + bytes(20))
    dec = decoder.RankDecoder(folder.parents[1], 0, writer=Tables())
    assert dec.decode_pending() == 0 and tmp.exists() and not dec.warnings
    assert segments.pending_count(folder.parents[1]) == 1
    dec.decode_pending(final=True)
    assert not tmp.exists() and "unfinished" in dec.warnings[0]
    assert segments.pending_count(folder.parents[1]) == 0


def test_a_large_drain_is_split_into_bounded_segments_on_whole_records(sink, tmp_path: Path) -> None:  # noqa: F811
    folder = tmp_path / "run" / "raw" / "rank0"
    folder.mkdir(parents=True)
    sink.reset()
    sink.configure([layouts.KIND_CONCURRENT_KERNEL])
    sink.segments_open(folder, 0, 0, 4096)
    try:
        name = ctypes.create_string_buffer(b"k")
        sink.feed_plain(b"".join(_kernel(ctypes.addressof(name), 1000 + i, i).tobytes() for i in range(100)))
        sink.segments_cycle()
    finally:
        sink.segments_close()
    found = segments.list_segments(folder)[0]
    assert len(found) >= 100 * layouts.KERNEL.itemsize // 4096
    assert max(s.path.stat().st_size for s in found) <= 4096 + segments.HEADER.size + 2 * segments.BLOCK.size + 8
    out = Tables()
    decoder.RankDecoder(folder.parents[1], 0, writer=out).decode_pending()
    assert out.rows("kernels").column("correlation").to_pylist() == list(range(100))
    assert sink.stats()["dropped_segment_write"] == 0


def test_the_writer_thread_writes_on_its_own_and_close_writes_the_rest(sink, tmp_path: Path) -> None:  # noqa: F811
    folder = tmp_path / "raw" / "rank0"
    folder.mkdir(parents=True)
    sink.reset()
    sink.configure([layouts.KIND_RUNTIME])
    sink.segments_open(folder, 0, 0.05, 1 << 20)
    try:
        sink.feed_plain(_api(layouts.KIND_RUNTIME, LAUNCH, 1).tobytes())
        deadline = time.monotonic() + 10
        while not segments.list_segments(folder)[0] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(segments.list_segments(folder)[0]) == 1
        sink.feed_plain(_api(layouts.KIND_RUNTIME, LAUNCH, 2).tobytes())
    finally:
        sink.segments_close()
    assert len(segments.list_segments(folder)[0]) == 2
    st = sink.stats()
    assert st["segments"] == 2 and st["segment_errors"] == 0 and st["peak_pending_bytes"] >= layouts.API.itemsize


def test_segments_open_refuses_a_folder_it_cannot_write(sink, tmp_path: Path) -> None:  # noqa: F811
    from perfscope.errors import CuptiUnavailableError

    with pytest.raises(CuptiUnavailableError, match="cannot write segments"):
        sink.segments_open(tmp_path / "missing", 0, 0, 1 << 20)


def test_a_segment_of_another_format_or_layout_is_refused(tmp_path: Path) -> None:
    from perfscope.errors import CorruptRunError

    p = tmp_path / "1-00000000.cupti"
    head = segments.HEADER.pack(segments.MAGIC, 2, 64, layouts.CUPTI_API_VERSION, 1, 0, 0, 0, 0, 0, 0)
    p.write_bytes(head)
    with pytest.raises(CorruptRunError, match="format version 2"):
        segments.read_segment(p)
    p.write_bytes(segments.HEADER.pack(segments.MAGIC, 1, 64, 120000, 1, 0, 0, 0, 0, 0, 0))
    with pytest.raises(CorruptRunError, match="CUPTI API 120000"):
        segments.read_segment(p)


def test_the_child_decoder_follows_until_told_to_stop(writing) -> None:
    sink, folder = writing
    from perfscope.store import open_run

    run = folder.parents[1]
    _feed(sink, [b"child"], 5_000)
    sink.segments_cycle()
    proc = subprocess.Popen([sys.executable, "-m", "perfscope.collectors.cupti.decodeproc", str(run), "--rank", "0",
                             "--follow", "0.05"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate("stop\n", timeout=120)
    assert proc.returncode == 0
    stats = json.loads(out)
    assert stats["segments"] == 1 and stats["rows"] == {"kernels": 1, "api": 1}
    r = open_run(run)
    assert r.table("kernels")["name"].astype(str).tolist() == ["child"]
    assert r.verify().ok
