"""What a recording rank writes about itself into ``ranks/rank-N.json``."""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from perfscope._rankinfo import versions

if TYPE_CHECKING:
    from perfscope.recorder.profiler import Profiler


def rank_info(prof: Profiler, status: str, *, reason: str | None = None, final: bool = False) -> dict[str, Any]:
    """Return the rank document of ``prof`` (see :mod:`perfscope.store.meta` for the fields).

    Args:
        status: ``recording``, ``complete`` or ``incomplete``.
        reason: why recording stopped (final documents only).
        final: the profiler stopped: add stop time, rows written and collector statistics
            (and warn when the schedule's warm-up never ended).
    """
    info: dict[str, Any] = {
        "local_rank": prof.local_rank,
        "world_size": prof.world_size,
        "source": prof.source,
        "status": status,
        "started_ns": prof._started_ns,
        "argv": list(sys.orig_argv),
        "gpu": prof._gpu_info(),
        "versions": versions(),
        "clock_offset_ns": int(prof._facts.get("clock_offset_ns", 0) or 0),
        "collectors": list(prof.collectors),
        "dropped_events": prof.dropped_events,
        "warnings": list(prof.warnings),
    }
    if prof.schedule is not None:
        info["schedule"] = prof.schedule.as_dict()
        if prof._steps is not None:
            info["windows"] = prof._steps.windows_meta()
    if prof._steps is not None:
        info["steps_source"] = prof._steps.mode
    if final:
        _add_final(prof, info, reason)
    return info


def _add_final(prof: Profiler, info: dict[str, Any], reason: str | None) -> None:
    info["stopped_ns"] = time.time_ns()
    if reason:
        info["stop_reason"] = reason
    if prof._error:
        info["error"] = prof._error
    if prof._writer is not None:
        info["rows_written"] = dict(prof._writer.rows_written)
    details = prof._set.details if prof._set is not None else {}
    if details:
        info["collector_stats"] = dict(details)
    steps, schedule = prof._steps, prof.schedule
    if schedule is not None and steps is not None and not any(w.first_step is not None for w in steps.windows):
        # Not a note: the run is over, nobody is left to see a Python warning.
        if schedule.on_demand:
            why = "no `perfscope trigger` request opened a window"
        elif steps.count < schedule.skip:
            why = f"the schedule skips {schedule.skip} steps but only {steps.count} were seen"
        else:
            why = f"the schedule's first window was not reached in the {steps.count} steps seen"
        prof.warnings.append(f"{why}: nothing was recorded")
        info["warnings"] = list(prof.warnings)


__all__ = ["rank_info"]
