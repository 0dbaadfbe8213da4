"""The segment files the native sink writes out of the training process (reading them).

With :meth:`perfscope.collectors.cupti.native.Sink.segments_open` the sink's own C thread
writes every record it keeps to ``<run>/raw/rank<R>/<pid>-<seq>.cupti`` (see ``sink.c``,
"segments"), so the training process runs no Python per record or per buffer; a decoder
in another process (:mod:`perfscope.collectors.cupti.decoder`) turns them into tables.

Format (version 1, little-endian)::

    header, 64 bytes: magic "PSCUPTI\\0", version u32, header_bytes u32, layout_version u32
        (the CUPTI API version of the record layouts), pid u32, seq u64, clock_offset_ns
        i64, nblocks u32, flags u32, created_ns u64, payload_bytes u64 (bytes after the
        header)
    nblocks blocks, each a 32-byte header, kind i32 (CUPTI activity kind; 0: strings),
        record_bytes u32, count u64, first_id u64 (strings: the id of the first), payload
        u64 (bytes), then the payload padded to 8 bytes

Record payloads are the records byte for byte, string fields holding string id + 1; a
strings block holds the strings interned since the previous one, NUL-separated, so the
segments of one pid read in ``seq`` order name every string their records refer to.

A segment is written under ``.<pid>-<seq>.cupti.tmp``, fsynced and renamed: a file with
the final name is whole unless damaged afterwards.  The decoder renames a segment it has
turned into tables to ``<name>.decoded`` (kept for its strings until the run is done) and
one it cannot read to ``<name>.damaged``.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfscope.collectors.cupti import layouts
from perfscope.errors import CorruptRunError
from perfscope.store.meta import RAW_DIR, undecoded_raw_files

MAGIC = b"PSCUPTI\0"
VERSION = 1
HEADER = struct.Struct("<8sIIIIQqIIQQ")
BLOCK = struct.Struct("<iIQQQ")
KIND_STRINGS = 0
SUFFIX, DECODED, DAMAGED = ".cupti", ".decoded", ".damaged"
_NAME = re.compile(r"^(\d+)-(\d+)\.cupti(\.decoded)?$")
_TMP = re.compile(r"^\.(\d+)-(\d+)\.cupti\.tmp$")


def rank_folder(run_path: Path, rank: int) -> Path:
    """``<run>/raw/rank<R>``: where rank R's sink writes its segments."""
    return Path(run_path) / RAW_DIR / f"rank{int(rank)}"


def rank_folders(run_path: Path) -> dict[int, Path]:
    """Every rank folder of segments under the run, by rank."""
    out: dict[int, Path] = {}
    root = Path(run_path) / RAW_DIR
    if root.is_dir():
        for p in root.iterdir():
            m = re.fullmatch(r"rank(\d+)", p.name)
            if m and p.is_dir():
                out[int(m.group(1))] = p
    return out


@dataclass(frozen=True)
class SegmentHeader:
    """A segment's header (see the module docstring)."""

    version: int
    layout_version: int
    pid: int
    seq: int
    clock_offset_ns: int
    nblocks: int
    created_ns: int
    payload_bytes: int


@dataclass(frozen=True)
class Block:
    """One block: ``kind`` (0: strings), ``record_bytes``, ``count``, ``first_id`` and its
    payload bytes (a NumPy uint8 view; empty when read with ``strings_only``)."""

    kind: int
    record_bytes: int
    count: int
    first_id: int
    data: np.ndarray


@dataclass(frozen=True)
class SegmentFile:
    """A segment file found in a rank folder: ``decoded`` once its records are in tables."""

    pid: int
    seq: int
    path: Path
    decoded: bool


def list_segments(folder: Path) -> tuple[list[SegmentFile], list[Path]]:
    """Return (the whole segments in ``folder``, sorted by pid then seq; the unfinished
    ``.tmp`` files: segments being written, or left by a process killed while writing)."""
    segs, tmps = [], []
    if not folder.is_dir():
        return [], []
    for p in folder.iterdir():
        m = _NAME.match(p.name)
        if m:
            segs.append(SegmentFile(int(m.group(1)), int(m.group(2)), p, bool(m.group(3))))
        elif _TMP.match(p.name):
            tmps.append(p)
    segs.sort(key=lambda s: (s.pid, s.seq))
    return segs, sorted(tmps)


def pending_count(run_path: Path) -> int:
    """Segments under the run not yet decoded (unfinished ``.tmp`` files included)."""
    return len(undecoded_raw_files(Path(run_path)))


def _damaged(path: Path, why: str) -> CorruptRunError:
    return CorruptRunError(f"CUPTI segment {path} is damaged ({why}); its records are left out")


def read_header(path: Path, raw: bytes) -> SegmentHeader:
    """Parse and check a segment's header from its first bytes.

    Raises:
        CorruptRunError: not a segment, a newer format, other record layouts, or a file
            shorter or longer than its header says (truncated).
    """
    if len(raw) < HEADER.size:
        raise _damaged(path, f"{len(raw)} bytes, shorter than its header")
    magic, version, hbytes, layout, pid, seq, offset, nblocks, _flags, created, payload = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise _damaged(path, "not a perfscope CUPTI segment")
    if version != VERSION or hbytes != HEADER.size:
        raise CorruptRunError(f"CUPTI segment {path} has format version {version}; this perfscope reads version {VERSION}: "
                              "decode it with the perfscope that recorded it")
    if layout != layouts.CUPTI_API_VERSION:
        raise CorruptRunError(f"CUPTI segment {path} holds records of CUPTI API {layout}; this perfscope decodes "
                              f"{layouts.CUPTI_API_VERSION}: decode it with the perfscope that recorded it")
    return SegmentHeader(version, layout, pid, seq, offset, nblocks, created, payload)


def read_segment(path: Path, *, strings_only: bool = False) -> tuple[SegmentHeader, list[Block]]:
    """Read a segment file: its header and blocks (record blocks left empty with
    ``strings_only``, which reads only the headers and the strings).

    Raises:
        CorruptRunError: see :func:`read_header`; also a block that overruns the file or
            whose size does not match its record count.
    """
    with open(path, "rb") as f:
        head = f.read(HEADER.size)
        header = read_header(path, head)
        size = f.seek(0, 2)
        if size != HEADER.size + header.payload_bytes:
            raise _damaged(path, f"{size} bytes where its header says {HEADER.size + header.payload_bytes}: truncated")
        blocks, pos = [], HEADER.size
        for _ in range(header.nblocks):
            f.seek(pos)
            bh = f.read(BLOCK.size)
            if len(bh) < BLOCK.size:
                raise _damaged(path, "a block header overruns the file")
            kind, rec, count, first, nbytes = BLOCK.unpack(bh)
            end = pos + BLOCK.size + ((nbytes + 7) & ~7)
            if end > size or (kind != KIND_STRINGS and nbytes != count * rec):
                raise _damaged(path, f"block of kind {kind} does not fit its header")
            if kind == KIND_STRINGS or not strings_only:
                data = np.frombuffer(f.read(nbytes), np.uint8)
            else:
                data = np.zeros(0, np.uint8)
            blocks.append(Block(kind, rec, count, first, data))
            pos = end
    return header, blocks


__all__ = ["MAGIC", "VERSION", "HEADER", "BLOCK", "RAW_DIR", "SegmentHeader", "Block", "SegmentFile", "rank_folder",
           "rank_folders", "list_segments", "pending_count", "read_header", "read_segment"]
