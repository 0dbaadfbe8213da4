"""``perfscope recover RUN``: decode what a killed job left undecoded, and say so in the run.

Recording processes hand raw records to a decoder in another process (the CUPTI sink's
segment files under ``raw/``, see :mod:`perfscope.collectors.cupti.segments`).  When the
whole job is killed (the ``record`` launcher too, or the process of a ``perfscope.profile``
together with its child decoder), what reached disk is still there, undecoded.
:func:`recover` decodes it through the registered collectors that know how (a ``job``
collector with a ``recover(run_path)`` method; the recorder names none), marks every rank
whose process is gone ``incomplete``, and records in ``run.json`` that the run was
recovered (``recovered``: by whom, when, segments and rows decoded), so a reader and
``Run.verify()`` see a run like any other: the decoder's parts are listed in its own
manifest.  :func:`recover_if_needed` is what ``perfscope info`` and ``analyze`` call first.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfscope.errors import PerfscopeError, UsageError


@dataclass
class RecoverResult:
    """What :func:`recover` did.

    Attributes:
        run_path: the run.
        segments: raw files decoded (all collectors and ranks).
        damaged: raw files left out (truncated, unfinished).
        rows: rows decoded per table.
        status: the run's status afterwards.
        notes: ranks marked ``incomplete`` and the decoders' warnings.
    """

    run_path: Path
    segments: int = 0
    damaged: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    status: str = ""
    notes: list[str] = field(default_factory=list)


def pending(run_path: str | os.PathLike[str]) -> int:
    """Raw files in the run that no decoder has turned into tables yet."""
    from perfscope.store.meta import undecoded_raw_files

    return len(undecoded_raw_files(Path(run_path)))


def recover(run_path: str | os.PathLike[str], *, by: str = "perfscope recover") -> RecoverResult:
    """Decode what the run's recording processes left undecoded and settle its statuses.

    Args:
        by: who recovered it (kept in ``run.json``'s ``recovered``).

    Returns:
        what was decoded and the run's status.

    Raises:
        InputError, NotARunError: ``run_path`` is not a run.
        UsageError: the run is still being recorded.
        CorruptRunError: a decoder still holds a rank's folder.
    """
    from perfscope.launch import reconcile_ranks
    from perfscope.store.meta import load_meta, update_run

    root = Path(run_path)
    if load_meta(root)["status"] == "recording":
        raise UsageError(f"{root} is still being recorded (its recording processes are alive); "
                         "recover it once the job has ended or been killed")
    result = RecoverResult(root, notes=reconcile_ranks(root, -1, 0))
    for name, by_rank in _decode(root).items():
        for rank, stats in by_rank.items():
            result.segments += int(stats.get("segments", 0))
            result.damaged += int(stats.get("damaged", 0))
            for table, n in (stats.get("rows") or {}).items():
                result.rows[table] = result.rows.get(table, 0) + int(n)
            result.notes += [f"rank {rank}: {w}" for w in stats.get("warnings", [])]
            _merge_rank_stats(root, rank, name, stats)
    fields: dict[str, Any] = {"recovered": {"by": by, "at_ns": time.time_ns(), "segments": result.segments,
                                            "damaged": result.damaged, "rows": dict(result.rows)}}
    meta = load_meta(root)
    if meta["status"] != "complete":
        fields["status"] = "incomplete"
    if result.segments or result.damaged:
        fields["notes"] = list(meta.get("notes", [])) + [
            f"{by} decoded {result.segments} raw file(s) the recording left undecoded (the job was killed)"]
    update_run(root, **fields)
    result.status = load_meta(root)["status"]
    return result


def _decode(root: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """Each registered collector's ``recover(root)`` result, by collector name."""
    from perfscope.collectors import registry

    out: dict[str, dict[int, dict[str, Any]]] = {}
    for spec in registry.REGISTRY:
        if spec.phase != "job":
            continue
        fn = getattr(spec.create(), "recover", None)
        if fn is not None:
            out[spec.name] = fn(root)
    return out


def _merge_rank_stats(root: Path, rank: int, name: str, stats: dict[str, Any]) -> None:
    """Put a decoder's statistics into the rank file (its ``collector_stats``), marked recovered."""
    from perfscope.store.meta import rank_meta_path, read_json, write_rank_meta

    p = rank_meta_path(root, rank)
    info: dict[str, Any] = read_json(p) if p.is_file() else {"rank": rank, "status": "incomplete"}
    details = dict(info.get("collector_stats") or {})
    details[name] = {**stats, "recovered": True}
    info["collector_stats"] = details
    write_rank_meta(root, rank, info)


def recover_if_needed(run_path: str | os.PathLike[str], *, by: str) -> str | None:
    """Recover the run when a killed job left raw files undecoded and nothing records it now.

    Returns:
        a line saying what was done (or why it could not be, and what to run), or None
        when there was nothing to do.
    """
    root = Path(run_path)
    n = pending(root) if (root / "run.json").is_file() else 0
    if not n:
        return None
    from perfscope.store.meta import load_meta

    try:
        if load_meta(root)["status"] == "recording":
            return None  # its own decoder is at work
        result = recover(root, by=by)
    except (PerfscopeError, OSError) as e:
        return f"{n} raw file(s) in {root} are not decoded ({e}); run `perfscope recover {root}`"
    rows = ", ".join(f"{t} {r:,}" for t, r in sorted(result.rows.items())) or "no rows"
    return (f"decoded {result.segments} raw file(s) a killed job left undecoded in {root} ({rows}); "
            "the run is marked recovered")


__all__ = ["RecoverResult", "recover", "recover_if_needed", "pending"]
