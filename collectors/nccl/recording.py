"""The NCCL collectors for the recorder: plugin set-up before the job, ingest after it
(:class:`NcclRecording`), and the pause between a schedule's windows (:class:`NcclWindow`).

One implementation for both ways of recording:

* ``perfscope record``'s launcher starts it with the child environment and no rank
  (``ctx.rank`` None): the plugin variables go into the job's environment, and at stop
  every rank's files become the ``collectives``, ``nccl_channels`` and ``proxy`` tables;
* ``perfscope.profile`` starts it in its own process (``ctx.env`` is ``os.environ``, the
  variables are restored at stop) and ingests only its rank, from what the plugin has
  written by then (it writes as it goes and at communicator teardown).

Under a schedule, :class:`NcclWindow` (a pausable ``window`` collector, so it runs in the
training process) sets the plugin's level to 0 between windows: NCCL then calls the plugin
for nothing (it samples the mask per operation), and what a warm-up recorded is dropped at
ingest (:func:`perfscope.collectors.nccl.env.ingest_dir`), as for the other collectors.
"""
from __future__ import annotations

import sys
from collections.abc import MutableMapping

from perfscope.collectors.base import CollectorContext, CollectorStats
from perfscope.collectors.nccl import flush_in_process, plugin_path, set_level_in_process
from perfscope.collectors.nccl.env import (
    DEFAULT_LEVEL, LEVEL_VAR, PAUSED_VAR, PLUGIN_VAR, configure_env, default_dir, ingest_dir, summarize_dir,
)
from perfscope.errors import CollectorError


class NcclRecording:
    """perfscope's NCCL profiler plugin, configured for a job and read back at its end."""

    def __init__(self) -> None:
        self._ctx: CollectorContext | None = None
        self._changed: dict[str, str | None] = {}

    def start(self, ctx: CollectorContext) -> bool:
        """Point NCCL at the plugin through ``ctx.env``; False (with a note) when it cannot load."""
        if _nccl_already_initialised():
            ctx.note(
                "torch.distributed was initialised before perfscope.profile() started, so NCCL cannot load the "
                "profiler plugin: collectives are not recorded. Start profiling before init_process_group, "
                "or use `perfscope record`"
            )
            return False
        env = dict(ctx.env)
        try:
            warnings = configure_env(env, default_dir(ctx.run_path))
        except Exception as e:  # noqa: BLE001
            ctx.note(f"the NCCL profiler plugin was not configured ({type(e).__name__}: {e})")
            return False
        for w in warnings:
            ctx.note(str(w))
        if warnings or not env.get("NCCL_PROFILER_PLUGIN"):
            return False  # level 0, or the user's own plugin: nothing was changed
        self._changed = _apply(ctx.env, env)
        self._ctx = ctx
        return True

    def flush(self) -> None:
        """Nothing to do: the plugin writes its own files every second."""

    def stop(self) -> CollectorStats:
        """Restore the environment and turn the plugin's files into tables.

        Returns:
            the plugin's dropped events and details (``nccl_plugin``), for ``ctx.rank``, or
            in ``by_rank`` for every rank found when run by the launcher.
        """
        ctx, self._ctx = self._ctx, None
        if ctx is None:
            return CollectorStats()
        _apply(ctx.env, self._changed)
        self._changed = {}
        raw = default_dir(ctx.run_path)
        try:
            if ctx.rank is not None:
                flush_in_process()  # write what the plugin still holds in memory
            if not raw.is_dir() or not any(raw.iterdir()):
                return CollectorStats()
            ingest_dir(str(raw), str(ctx.run_path), ranks=None if ctx.rank is None else [ctx.rank])
        except Exception as e:  # noqa: BLE001
            left = f"they stay in {raw}" if ctx.rank is None else "no collectives table"
            ctx.note(f"reading the NCCL plugin's files failed ({type(e).__name__}: {e}); {left}")
            return CollectorStats()
        try:
            summary = summarize_dir(str(raw))
        except Exception:  # noqa: BLE001 - the tables are written; only the counters are missing
            return CollectorStats()
        by_rank = {rank: _rank_stats(extra) for rank, extra in summary.items()}
        if ctx.rank is None:
            return CollectorStats(by_rank=by_rank)
        return by_rank.get(ctx.rank, CollectorStats())


class NcclWindow:
    """Pauses perfscope's NCCL plugin in this process between a schedule's windows.

    NCCL loads the plugin at its first communicator, maybe long after the recording began:
    a pause before that leaves ``PERFSCOPE_NCCL_PAUSED=1`` in the environment, so that the
    plugin loads paused, and :meth:`resume` removes it.  Runs only where the plugin is set up
    for this process (``NCCL_PROFILER_PLUGIN`` names perfscope's); otherwise it says nothing
    and does not start (the NCCL collector's own notes say why).
    """

    def __init__(self) -> None:
        self._env: MutableMapping[str, str] | None = None
        self._level = DEFAULT_LEVEL
        self.pauses = 0

    def start(self, ctx: CollectorContext) -> bool:
        """Take the level to resume to from ``ctx.env``; False where the plugin is not ours."""
        try:
            ours = ctx.rank is not None and ctx.env.get(PLUGIN_VAR) == str(plugin_path())
            level = int(ctx.env.get(LEVEL_VAR, DEFAULT_LEVEL))
        except (CollectorError, ValueError):
            return False
        if not ours or level <= 0:
            return False
        self._env, self._level = ctx.env, level
        return True

    def pause(self) -> None:
        """Level 0 for every communicator, and for those NCCL creates later."""
        if self._env is None:
            return
        self.pauses += 1
        self._env[PAUSED_VAR] = "1"  # read by the plugin when NCCL loads it (not loaded yet)
        old = set_level_in_process(0)
        if old:
            self._level = old  # a level someone set while recording: resume to it

    def resume(self) -> None:
        """Back to the level the recording asked for."""
        if self._env is None:
            return
        self._env.pop(PAUSED_VAR, None)
        set_level_in_process(self._level)

    def flush(self) -> None:
        """Nothing to do: the plugin writes its own files."""

    def stop(self) -> CollectorStats:
        """Leave the environment as it was (the plugin keeps its level: NCCL is tearing down)."""
        if self._env is not None:
            self._env.pop(PAUSED_VAR, None)
        self._env = None
        return CollectorStats()


def _rank_stats(extra: dict[str, object]) -> CollectorStats:
    dropped = {str(k): int(v) for k, v in (extra.get("dropped_events") or {}).items()}  # type: ignore[attr-defined]
    details = {"nccl_plugin": extra["nccl_plugin"]} if extra.get("nccl_plugin") else {}
    return CollectorStats(dropped=dropped, details=details)


def _apply(target: MutableMapping[str, str], values: MutableMapping[str, str] | dict[str, str | None]) -> dict[str, str | None]:
    """Make ``target`` hold ``values`` (None: unset); return what it held before, to undo."""
    before: dict[str, str | None] = {}
    for k, v in values.items():
        if target.get(k) == v:
            continue
        before[k] = target.get(k)
        if v is None:
            target.pop(k, None)
        else:
            target[k] = v
    return before


def _nccl_already_initialised() -> bool:
    """True when this process already created its NCCL process group (too late for the plugin)."""
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl")
    except Exception:  # noqa: BLE001
        return False


__all__ = ["NcclRecording", "NcclWindow"]
