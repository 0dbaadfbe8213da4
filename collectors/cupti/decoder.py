"""Turning raw CUPTI records into store tables, in the training process or out of it.

:class:`RecordStream` decodes successive drains of one process's sink (what the in-process
collector does each flush); :class:`RankDecoder` does the same for the segment files a
rank's sink wrote (:mod:`.segments`), in another process: the ``record`` launcher, the
child :func:`follow` runs for ``perfscope.profile``, or ``perfscope recover`` after a job
was killed.  Neither needs CUDA or cupti-python.

Once the parts holding a segment's rows are published (and listed in the decoder's
manifest) the segment is removed, or, when it holds names (a strings block) that later
segments refer to, renamed ``*.decoded`` (a later decoder reads only its names).  The
segments of one call of :meth:`RankDecoder.decode_pending` are one batch, staged, journaled
and published by :class:`~perfscope.collectors.cupti.publish.Publisher` so that a decoder
killed at any point neither loses a record nor makes a later decoder (``perfscope recover``)
publish one twice.  When the recording is over (:meth:`RankDecoder.finish`) the folder is
removed.  Each rank folder has a lock file, so two decoders never work on one rank at once.

:func:`follow` is what the child decoder of ``perfscope.profile`` runs
(``python -m perfscope.collectors.cupti.decodeproc``).
"""
from __future__ import annotations

import fcntl
import os
import select
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from perfscope._steps import drop_rows, settled_warmups
from perfscope.collectors.base import Writer
from perfscope.collectors.cupti import decode, layouts, publish, segments
from perfscope.errors import CorruptRunError

LOCK_NAME = ".lock"
LOST_STRING = "<name lost: its segment was damaged>"


class RecordStream:
    """Decodes the successive drains of one process's sink into store batches.

    Attributes:
        strings: the process's string table (ids never reset within a process).
        rows: rows decoded per table; ``overhead``: CUPTI overhead records by kind;
        untimed: records CUPTI could not time (left out).
    """

    def __init__(self, strings: decode.StringTable | None = None) -> None:
        self.strings = strings if strings is not None else decode.StringTable()
        self.markers = decode.MarkerState()
        self.context_device: dict[int, int] = {}
        self.rows: dict[str, int] = {}
        self.overhead: dict[str, dict[str, int]] = {}
        self.untimed = 0

    def decode(self, raw: Mapping[str, decode.Columns], offset_ns: int) -> dict[str, pa.Table]:
        """Decode one drain (records per layout name) and return its batches by table name."""
        raw = dict(raw)
        over = raw.pop("overhead", None)
        if over is not None and len(over):
            for name, v in decode.summarize_overhead(over).items():
                acc = self.overhead.setdefault(name, {"count": 0, "ns": 0})
                acc["count"] += v["count"]
                acc["ns"] += v["ns"]
        for cols in raw.values():
            if len(cols) and "start" in cols.names:
                self.untimed += int((cols["start"] == 0).sum())
        tables = decode.decode_all(raw, self.strings, offset_ns, context_device=self.context_device,
                                   marker_state=self.markers)
        for table, batch in tables.items():
            self.rows[table] = self.rows.get(table, 0) + batch.num_rows
        return tables

    def add_strings(self, blob: bytes, first_id: int) -> bool:
        """Add a strings block; a gap (a damaged segment's strings) is filled with a
        placeholder name.  Returns False when there was a gap."""
        have = len(self.strings.strings)
        if first_id > have:
            self.strings.strings.extend([LOST_STRING] * (first_id - have))
        elif first_id < have:  # seen already (a segment read twice): keep what is new
            parts = blob.split(b"\0")[have - first_id:]
            blob, first_id = b"\0".join(parts), have
        self.strings.extend(blob, first_id)
        return first_id <= have


class RankDecoder:
    """Decodes one rank's segment files into the rank's tables (a writer of its own).

    Args:
        run_path: the run directory.
        rank: the rank whose folder (``raw/rank<R>``) is decoded.
        writer: where batches go, appended and flushed before the segments are retired
            (tests); default: the run itself, each batch published exactly once (see
            :mod:`perfscope.collectors.cupti.publish`).
    """

    def __init__(self, run_path: Path, rank: int, writer: Writer | None = None) -> None:
        self.run_path = Path(run_path)
        self.rank = int(rank)
        self.folder = segments.rank_folder(self.run_path, rank)
        self._writer = writer
        self._publisher = publish.Publisher(self.run_path, rank) if writer is None else None
        self._procs: dict[int, tuple[RecordStream, list[int]]] = {}  # pid -> (stream, [next seq])
        self._lock_fd: int | None = None
        self.segments = 0
        self.damaged = 0
        self.records: dict[str, int] = {}
        self.decode_ns = 0
        self.warnings: list[str] = []

    # -- the lock: one decoder per rank folder --
    def acquire(self) -> bool:
        """Take the rank folder's lock (without waiting); False when another decoder holds it."""
        if self._lock_fd is not None:
            return True
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def finish(self) -> None:
        """The recording is over and everything is decoded: remove the decoded segments,
        the lock and the folder (damaged segments stay, for inspection)."""
        if self._publisher is not None:
            self._publisher.resume()  # a batch a failed call left staged: finished, never dropped
            self._publisher.clear()
        for seg in segments.list_segments(self.folder)[0]:
            if seg.decoded:
                seg.path.unlink(missing_ok=True)
        self.close()
        (self.folder / LOCK_NAME).unlink(missing_ok=True)
        for d in (self.folder, self.folder.parent):
            try:
                d.rmdir()
            except OSError:
                break  # not empty: another rank's folder, a damaged segment

    def close(self) -> None:
        """Release the lock (every batch is published by the call that decoded it)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- decoding --
    def decode_pending(self, *, final: bool = False) -> int:
        """Decode every whole segment not decoded yet, as one batch; with ``final`` (the
        writing processes have ended) also give up on unfinished ones, with a warning.
        First, finish what a decoder killed before (or a call that failed) left staged
        (see :mod:`.publish`).

        Returns:
            the number of segments decoded by this call.
        """
        t0 = time.perf_counter_ns()
        if self._publisher is not None:
            self._publisher.resume()
        found, tmps = segments.list_segments(self.folder)
        done: list[tuple[Path, bool]] = []  # (segment, holds names)
        out, key = self._writer, ""  # the batch's writer: the caller's, or a stage made at its first table
        for seg in found:
            stream, next_seq = self._procs.setdefault(seg.pid, (RecordStream(), [0]))
            if seg.seq < next_seq[0]:
                continue
            next_seq[0] = seg.seq + 1
            try:
                header, blocks = segments.read_segment(seg.path, strings_only=seg.decoded)
            except (CorruptRunError, OSError) as e:
                self._give_up(seg.path, str(e))
                continue
            self._strings(stream, seg.path, blocks)
            if not seg.decoded:
                tables = self._decode(stream, header, blocks)
                if tables and out is None and self._publisher is not None:
                    key = f"{seg.pid}-{seg.seq}"
                    out = self._publisher.stage(key)
                for table, batch in tables.items():
                    out.append(table, batch)  # type: ignore[union-attr]
                done.append((seg.path, any(b.kind == segments.KIND_STRINGS for b in blocks)))
        if final:
            for tmp in tmps:
                self._give_up(tmp, f"unfinished CUPTI segment {tmp.name} left out: its process was killed while "
                                   "writing it (at most one flush interval of records)")
        self._publish(out, key, done)
        self.segments += len(done)
        self.decode_ns += time.perf_counter_ns() - t0
        return len(done)

    def _publish(self, out: Writer | None, key: str, done: list[tuple[Path, bool]]) -> None:
        """Make the batch's rows part of the run, then retire its segments."""
        if out is not None and out is not self._writer:
            out.close()  # type: ignore[attr-defined]
            self._publisher.commit(key, done)  # type: ignore[union-attr]
            return
        flush = getattr(out, "flush", None)
        if done and flush is not None:
            flush()
        for path, names in done:
            publish.retire(path, names)

    def _give_up(self, path: Path, why: str) -> None:
        self.damaged += 1
        self.warnings.append(why)
        name = path.name.lstrip(".").removesuffix(".tmp").removesuffix(segments.DECODED)
        try:
            os.replace(path, path.with_name(name + segments.DAMAGED))
        except OSError:
            pass

    def _strings(self, stream: RecordStream, path: Path, blocks: list[segments.Block]) -> None:
        for b in blocks:
            if b.kind == segments.KIND_STRINGS and not stream.add_strings(b.data.tobytes(), b.first_id):
                self.warnings.append(f"names before {path.name} were lost with a damaged segment; "
                                     f"they read {LOST_STRING!r}")

    def _decode(self, stream: RecordStream, header: segments.SegmentHeader,
                blocks: list[segments.Block]) -> dict[str, pa.Table]:
        """One segment's record blocks as tables by name, without a settled warm-up's rows."""
        parts: dict[str, list[decode.Columns]] = {}
        for b in blocks:
            lay = layouts.LAYOUTS.get(b.kind)
            if lay is None or b.kind == segments.KIND_STRINGS:
                continue
            if b.record_bytes != lay.dtype.itemsize:
                self.warnings.append(f"records of kind {b.kind} are {b.record_bytes} bytes, not {lay.dtype.itemsize}: left out")
                continue
            parts.setdefault(lay.name, []).append(decode.as_columns(decode.records(b.data, lay)))
            self.records[lay.name] = self.records.get(lay.name, 0) + b.count
        raw = {name: decode.Columns.concat(cols) for name, cols in parts.items()}
        tables = stream.decode(raw, header.clock_offset_ns)
        warmups = self._warmups() if tables else []
        return {table: drop_rows(batch, warmups)[0] for table, batch in tables.items()}

    def _warmups(self) -> list[tuple[int, int | None]]:
        """The rank's schedule warm-ups whose end its metadata already gives (their rows are
        dropped, as the training process does when it decodes; see :mod:`perfscope._steps`)."""
        from perfscope.store.meta import rank_meta_path, read_json

        try:
            return settled_warmups(read_json(rank_meta_path(self.run_path, self.rank)).get("windows") or [])
        except Exception:  # noqa: BLE001 - no or a half-written rank file: keep every row
            return []

    def stats(self) -> dict[str, Any]:
        """``segments`` decoded, ``damaged`` (left out), ``records`` per layout name,
        ``rows`` per table, ``untimed_records``, ``overhead`` (CUPTI's, by kind),
        ``decode_ns`` and ``warnings``."""
        rows: dict[str, int] = {}
        overhead: dict[str, dict[str, int]] = {}
        untimed = 0
        for stream, _ in self._procs.values():
            untimed += stream.untimed
            for k, v in stream.rows.items():
                rows[k] = rows.get(k, 0) + v
            for k, o in stream.overhead.items():
                acc = overhead.setdefault(k, {"count": 0, "ns": 0})
                acc["count"] += o["count"]
                acc["ns"] += o["ns"]
        return {"segments": self.segments, "damaged": self.damaged, "records": dict(self.records), "rows": rows,
                "untimed_records": untimed, "overhead": overhead, "decode_ns": self.decode_ns,
                "warnings": list(self.warnings)}


def decode_run(run_path: Path, *, final: bool = True) -> dict[int, dict[str, Any]]:
    """Decode what every rank folder of the run holds (``perfscope recover``).

    Returns:
        each rank's :meth:`RankDecoder.stats`, for the ranks whose folder had segments.

    Raises:
        CorruptRunError: a rank folder is locked by a decoder still running.
    """
    out: dict[int, dict[str, Any]] = {}
    for rank in sorted(segments.rank_folders(run_path)):
        dec = RankDecoder(run_path, rank)
        if not dec.acquire():
            raise CorruptRunError(f"a decoder is still working on {dec.folder} (the job is still recording?); "
                                  "wait for it to finish, then try again")
        try:
            dec.decode_pending(final=final)
            if final:
                dec.finish()
        finally:
            dec.close()
        if dec.segments or dec.damaged:
            out[rank] = dec.stats()
    return out


def follow(run_path: Path, rank: int, interval_s: float, stdin: Any = None) -> dict[str, Any]:
    """Decode rank ``rank``'s segments every ``interval_s`` until told to stop (see the
    module docstring), then the rest; returns the statistics (see :meth:`RankDecoder.stats`)."""
    stdin = stdin if stdin is not None else sys.stdin
    parent = os.getppid()
    dec = RankDecoder(run_path, rank)
    while not dec.acquire():
        if _told_to_stop(stdin, interval_s, parent):
            return {"warnings": [f"another decoder held {dec.folder}; this one decoded nothing"]}
    try:
        while not _told_to_stop(stdin, interval_s, parent):
            dec.decode_pending()
        dec.decode_pending(final=True)
        dec.finish()
    finally:
        dec.close()
    return dec.stats()


def _told_to_stop(stdin: Any, timeout_s: float, parent: int) -> bool:
    """Wait up to ``timeout_s`` for a line or the end of ``stdin``; True then, or when the
    parent process is gone."""
    ready, _, _ = select.select([stdin], [], [], timeout_s)
    if ready:
        os.read(stdin.fileno(), 4096)
        return True
    return os.getppid() != parent


__all__ = ["RecordStream", "RankDecoder", "decode_run", "follow", "LOST_STRING"]
