"""The CUPTI collector for the recorder: a :class:`CuptiCollector` for one rank.

By default its sink writes segment files into ``<run>/raw/rank<R>/`` and a decoder in
another process turns them into the rank's tables (:mod:`.decoding`); with the collector
option ``cupti_decode="inprocess"`` (``PERFSCOPE_CUPTI_DECODE=inprocess``) it decodes at
each flush into the rank's writer, in the training process.

Importing it needs no GPU and no cupti-python (:func:`cupti.available` probes at start), so
a machine without them records its host data with one clear note instead of failing.
"""
from __future__ import annotations

from typing import Any

from perfscope.collectors import cupti
from perfscope.collectors.base import CollectorContext, CollectorStats, dropped_count
from perfscope.collectors.cupti import native, segments
from perfscope.collectors.cupti.probe import gpu_present
from perfscope.errors import CuptiUnavailableError

NVTX_VAR = "NVTX_INJECTION64_PATH"
#: the ``cupti_decode`` option value that keeps decoding in the training process
INPROCESS = "inprocess"


class CuptiRecording:
    """GPU activity (kernels, copies, memsets, syncs, API calls, NVTX) for one rank."""

    def __init__(self) -> None:
        self._ctx: CollectorContext | None = None
        self._collector: Any = None
        self._added_env: list[str] = []

    def start(self, ctx: CollectorContext) -> bool:
        """Start CUPTI; False (with a note saying why) when this process cannot use it."""
        native.use_library(ctx.options.cupti_sink_library)
        try:
            ok, reason = cupti.available()
        except Exception as e:  # noqa: BLE001
            ok, reason = False, f"{type(e).__name__}: {e}"
        if not ok:
            return _no_gpu(ctx, reason)
        self._ctx = ctx
        self._route_nvtx(ctx, cupti.nvtx_injection_env)
        try:
            assert ctx.writer is not None  # in-process collectors get the rank's writer
            out_of_process = ctx.options.cupti_decode != INPROCESS and ctx.rank is not None
            collector = cupti.CuptiCollector(
                ctx.writer, api_source=ctx.options.cupti_api_source, segment_interval_s=ctx.options.flush_interval_s,
                segment_dir=segments.rank_folder(ctx.run_path, int(ctx.rank or 0)) if out_of_process else None,
                detach=ctx.options.cupti_detach, uvm_counters=ctx.options.cupti_uvm or "auto",
            )
            collector.start()
        except CuptiUnavailableError as e:
            ctx.note(f"GPU activity is not recorded: {e}")
            self._restore_env()
            return False
        except Exception as e:  # noqa: BLE001
            ctx.note(f"the CUPTI collector failed to start ({type(e).__name__}: {e}); recording continues without GPU capture")
            self._restore_env()
            return False
        self._collector = collector
        ctx.facts["clock_offset_ns"] = int(getattr(collector, "clock_offset_ns", 0) or 0)
        return True

    def _route_nvtx(self, ctx: CollectorContext, injection_env: Any) -> None:
        """Set NVTX's injection variable before NVTX's first call, so annotate() ranges reach CUPTI."""
        if NVTX_VAR in ctx.env:
            return
        try:
            self._added_env = [k for k, v in injection_env().items() if ctx.env.setdefault(k, v) == v]
        except Exception:  # noqa: BLE001 - markers still land through perfscope's own rows
            self._added_env = []

    def _restore_env(self) -> None:
        # Child processes started after stop() must not load CUPTI as their NVTX injection.
        if self._ctx is not None:
            for k in self._added_env:
                self._ctx.env.pop(k, None)
        self._added_env = []

    def flush(self) -> None:
        """Hand the decoded records to the writer (out of process: nothing to do here)."""
        if self._collector is None or self._ctx is None:
            return
        try:
            self._collector.flush()
        except Exception as e:  # noqa: BLE001
            self._ctx.note(f"CUPTI flush failed ({type(e).__name__}: {e})")

    def pause(self) -> None:
        """Between a schedule's windows: CUPTI collects nothing (see :meth:`CuptiCollector.pause`)."""
        if self._collector is not None:
            self._collector.pause()

    def resume(self) -> None:
        """A window's warm-up begins: collect again."""
        if self._collector is not None:
            self._collector.resume()

    def stop(self) -> CollectorStats:
        """Stop CUPTI; its statistics go to ``collector_stats["cupti"]``, its drops to ``cupti``."""
        collector, self._collector = self._collector, None
        ctx = self._ctx
        self._restore_env()
        if collector is None or ctx is None:
            return CollectorStats()
        stats = collector.stop()
        ctx.facts["clock_offset_ns"] = int(getattr(collector, "clock_offset_ns", 0) or 0)
        for w in getattr(collector, "warnings", None) or []:
            ctx.note(str(w))
        out = CollectorStats(details={"cupti": stats})
        dropped = dropped_count(stats)
        if dropped:
            out.dropped["cupti"] = dropped
            ctx.note(f"CUPTI dropped {dropped} records (buffers full); raise the buffer size or record fewer steps")
        return out


def _no_gpu(ctx: CollectorContext, reason: str | None) -> bool:
    """Say why GPU activity is missing (the common case first: no GPU at all); returns False."""
    if not gpu_present():
        ctx.note("no NVIDIA GPU found on this machine: recorded host data only (steps, DataLoader waits, "
                 "barriers, optimizer steps, markers)")
    else:
        ctx.note(f"GPU activity is not recorded: {reason}")
    return False


__all__ = ["CuptiRecording"]
