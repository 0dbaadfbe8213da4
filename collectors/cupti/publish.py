"""Publishing a decoder's batches of segments exactly once, wherever the decoder is killed.

A :class:`~perfscope.collectors.cupti.decoder.RankDecoder` turns a batch of segments into
part files of the run and then retires the segments (removes them, or renames them
``*.decoded`` when later segments need their names).  A kill between the two must not make
the next decoder (a restarted one, or ``perfscope recover``) decode the batch again, and a
kill in the middle of publishing must not lose what was not published yet.  So a batch goes
through four steps, each of which a later decoder can tell apart:

1. **stage**: its tables are written into ``raw/rank<R>/.stage/<batch>/``, a run-like
   folder of their own (a :class:`~perfscope.store.RankWriter`; memory stays bounded by its
   flush size).  Killed here: the stage has no journal line, the next decoder removes it and
   decodes the segments, still pending, again.
2. **journal**: one line of ``raw/rank<R>/batches.jsonl`` names the batch and its segments
   (one ``write``, fsynced).  From here on the batch is decoded: a later decoder finishes
   steps 3 and 4 from the stage and never decodes its segments again.
3. **move in**: each staged part is hard-linked into the run as the next free
   ``TABLE/rank=R/part-NNNNN.parquet``, listed in the decoder's manifest, and its staged
   name removed.  A staged part with a second link was moved in before a kill: it is found
   by its inode and listed (a part listed twice is one part).
4. **retire**: the segments are removed or renamed ``*.decoded`` (the journal says which),
   then the stage.  A journaled batch without a stage is done.

On a file system without hard links a part is renamed into place instead; a kill between
that rename and its manifest line leaves a part read with a warning (still once).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from perfscope.collectors.cupti import segments
from perfscope.store import integrity
from perfscope.store.writer import RankWriter

JOURNAL = "batches.jsonl"
STAGE = ".stage"
_PART = re.compile(r"^part-(\d+)\.parquet$")


@dataclass(frozen=True)
class Batch:
    """A journaled batch: its ``key`` (stage folder name) and ``segments`` as
    (file name, holds names) pairs."""

    key: str
    segments: tuple[tuple[str, bool], ...]


class Publisher:
    """Stages, journals, moves in and retires the batches of one rank folder (see the module
    docstring).  The caller holds the rank folder's lock.

    Args:
        run_path: the run directory.
        rank: the rank whose folder (``raw/rank<R>``) this is.
    """

    def __init__(self, run_path: Path, rank: int) -> None:
        self.run_path = Path(run_path)
        self.rank = int(rank)
        self.folder = segments.rank_folder(self.run_path, rank)
        self._manifest: integrity.ManifestWriter | None = None
        self._next: dict[Path, int] = {}  # table folder -> the part number to try first

    def stage(self, key: str) -> RankWriter:
        """A writer of batch ``key``'s tables into a fresh stage (step 1); close it, then :meth:`commit`."""
        where = self.folder / STAGE / key
        shutil.rmtree(where, ignore_errors=True)  # left by a decoder killed while staging this batch
        return RankWriter(where, self.rank, flush_interval_s=float("inf"))

    def commit(self, key: str, done: Iterable[tuple[Path, bool]]) -> None:
        """Steps 2 to 4 for the staged batch ``key`` of the segments ``done`` ((path, holds names))."""
        batch = Batch(key, tuple((p.name, names) for p, names in done))
        _append_line(self.folder / JOURNAL, json.dumps({"batch": batch.key, "segments": batch.segments}))
        self._finish(batch)

    def resume(self) -> int:
        """Finish the journaled batches a killed (or failed) decoder left staged, and remove
        the stages it left without a journal line; returns the batches finished.  One
        directory listing when there is nothing to do (the journal is read only then)."""
        stage_root = self.folder / STAGE
        left = sorted(stage_root.iterdir()) if stage_root.is_dir() else []
        batches = {b.key: b for b in read_journal(self.folder / JOURNAL)} if left else {}
        finished = 0
        for where in left:
            batch = batches.get(where.name)
            if batch is None:
                _remove_stage(where)
                continue
            self._finish(batch)
            finished += 1
        return finished

    def clear(self) -> None:
        """The rank is done: remove the journal and what is left of the stages."""
        shutil.rmtree(self.folder / STAGE, ignore_errors=True)
        (self.folder / JOURNAL).unlink(missing_ok=True)

    def _finish(self, batch: Batch) -> None:
        where = self.folder / STAGE / batch.key
        staged = integrity.load_manifest(where, {}) or {}
        for key in sorted(staged):
            self._move_in(where, staged[key])
        for name, holds_names in batch.segments:
            retire(self.folder / name, holds_names)
        _remove_stage(where)

    def _move_in(self, where: Path, entry: integrity.PartEntry) -> None:
        """Step 3 for one staged part (nothing when its staged name is gone: done before)."""
        staged = where / entry.file
        if not staged.exists():
            return
        folder = self.run_path / entry.table / f"rank={self.rank}"
        final = _linked_from(staged, folder) if staged.stat().st_nlink > 1 else None
        if final is None:
            folder.mkdir(parents=True, exist_ok=True)
            final = _link_into(staged, folder, self._next.get(folder))
            self._next[folder] = int(_PART.match(final.name).group(1)) + 1  # type: ignore[union-attr]
        if self._manifest is None:
            self._manifest = integrity.ManifestWriter(self.run_path, self.rank)
        self._manifest.add(integrity.PartEntry(integrity.part_key(entry.table, self.rank, final.name), entry.table,
                                               self.rank, entry.rows, entry.bytes, entry.crc32))
        staged.unlink(missing_ok=True)


def read_journal(path: Path) -> list[Batch]:
    """The batches journaled in ``path`` (none when it does not exist); a last line cut short
    by a kill is no batch (its stage is removed and its segments decoded again)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_bytes().split(b"\n"):
        try:
            d = json.loads(line)
            out.append(Batch(str(d["batch"]), tuple((str(n), bool(h)) for n, h in d["segments"])))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _append_line(path: Path, text: str) -> None:
    """Append one line in one write and make it durable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (text + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_into(staged: Path, folder: Path, first: int | None = None) -> Path:
    """Give ``staged`` the first free ``part-NNNNN.parquet`` name in ``folder`` from ``first``
    on (None: after the highest there); never replaces a part another writer of the rank
    (the training process) published."""
    if first is None:
        nums = [int(m.group(1)) for p in folder.iterdir() if (m := _PART.match(p.name))]
        first = max(nums) + 1 if nums else 0
    n = first
    while True:
        final = folder / f"part-{n:05d}.parquet"
        try:
            os.link(staged, final)
            return final
        except FileExistsError:
            n += 1
        except OSError:  # no hard links here: a rename (see the module docstring)
            os.replace(staged, final)
            return final


def _linked_from(staged: Path, folder: Path) -> Path | None:
    """The part of ``folder`` that is ``staged`` under another name (linked in before a kill)."""
    if not folder.is_dir():
        return None
    return next((p for p in folder.iterdir() if _PART.match(p.name) and os.path.samefile(p, staged)), None)


def retire(path: Path, holds_names: bool) -> None:
    """A decoded segment: renamed ``*.decoded`` when it holds names, else removed (either
    done already by a killed decoder: nothing)."""
    try:
        if holds_names:
            os.replace(path, path.with_name(path.name + segments.DECODED))
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _remove_stage(where: Path) -> None:
    shutil.rmtree(where, ignore_errors=True)


__all__ = ["Publisher", "Batch", "read_journal", "retire", "JOURNAL", "STAGE"]
