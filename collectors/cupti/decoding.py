"""Decoding a recording's CUPTI segments outside the training processes (a ``job`` collector).

The sinks of the ranks write segment files (:mod:`.segments`); this collector turns them
into tables while the job runs and once more when it has ended:

* in the ``perfscope record`` launcher (``ctx.rank`` None), on a thread of the launcher,
  for every rank folder that appears;
* under ``perfscope.profile`` (``ctx.rank`` set), in a child process it starts
  (``python -m perfscope.collectors.cupti.decodeproc``) once the rank's segment folder exists
  (so a process that records no GPU activity starts none), which decodes until the
  recording process closes its standard input at stop, or dies: what reached disk is then
  decoded all the same.

:meth:`CuptiDecoding.recover` decodes what a killed job left (``perfscope recover``).
Off when the collector option ``cupti_decode`` is ``inprocess``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from perfscope.collectors.base import CollectorContext, CollectorStats
from perfscope.collectors.cupti import decoder, segments
from perfscope.collectors.cupti.recording import INPROCESS

#: how long stop() waits for the child decoder to decode what is left
CHILD_TIMEOUT_S = 600.0


class CuptiDecoding:
    """Decodes the ranks' CUPTI segments into their tables, out of the training process."""

    def __init__(self) -> None:
        self._ctx: CollectorContext | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._decoders: dict[int, decoder.RankDecoder] = {}
        self._child: subprocess.Popen[str] | None = None

    def start(self, ctx: CollectorContext) -> bool:
        """Start decoding (a thread in the launcher, a child process in-process); False
        when records are decoded in the training process instead."""
        if ctx.options.cupti_decode == INPROCESS:
            return False
        self._ctx = ctx
        if ctx.rank is None:
            self._thread = threading.Thread(target=self._follow, name="perfscope-cupti-decode", daemon=True)
            self._thread.start()
        return True

    def flush(self) -> None:
        """In-process: start the child decoder once the sink has made its folder (one
        ``stat`` per flush until then)."""
        ctx = self._ctx
        if ctx is not None and ctx.rank is not None and self._child is None:
            self._start_child(ctx, int(ctx.rank))

    def _start_child(self, ctx: CollectorContext, rank: int) -> None:
        if not segments.rank_folder(ctx.run_path, rank).is_dir():
            return
        self._child = subprocess.Popen(
            [sys.executable, "-m", "perfscope.collectors.cupti.decodeproc", str(Path(ctx.run_path).resolve()),
             "--rank", str(rank), "--follow", repr(ctx.options.flush_interval_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(ctx),
            close_fds=True,
        )

    def stop(self) -> CollectorStats:
        """Decode what is left and return each rank's decoding statistics
        (``cupti_decode``: see :meth:`perfscope.collectors.cupti.decoder.RankDecoder.stats`)."""
        ctx = self._ctx
        if ctx is None:
            return CollectorStats()
        if ctx.rank is not None:
            if self._child is None:
                self._start_child(ctx, int(ctx.rank))
            return self._stop_child(ctx, self._child) if self._child is not None else CollectorStats()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._decode_all(final=True)
        out = CollectorStats()
        for rank, dec in sorted(self._decoders.items()):
            dec.finish()
            out.by_rank[rank] = _stats(ctx, dec.stats())
        return out

    def recover(self, run_path: Path) -> dict[int, dict[str, Any]]:
        """Decode the segments a killed job left in ``run_path``; returns stats per rank
        (see :func:`perfscope.collectors.cupti.decoder.decode_run`)."""
        return decoder.decode_run(Path(run_path))

    # -- in the launcher --
    def _follow(self) -> None:
        assert self._ctx is not None
        while not self._stop.wait(self._ctx.options.flush_interval_s):
            self._decode_all(final=False)

    def _decode_all(self, *, final: bool) -> None:
        ctx = self._ctx
        assert ctx is not None
        for rank in segments.rank_folders(ctx.run_path):
            dec = self._decoders.setdefault(rank, decoder.RankDecoder(ctx.run_path, rank))
            try:
                if dec.acquire():
                    dec.decode_pending(final=final)
            except Exception as e:  # noqa: BLE001 - the job goes on; recover can try again
                ctx.note(f"decoding rank {rank}'s CUPTI records failed ({type(e).__name__}: {e}); "
                         f"`perfscope recover {ctx.run_path}` decodes them later")

    # -- in-process: the child decoder --
    def _stop_child(self, ctx: CollectorContext, child: subprocess.Popen[str]) -> CollectorStats:
        try:
            out, err = child.communicate("stop\n", timeout=CHILD_TIMEOUT_S)  # it decodes the rest and exits
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        try:
            stats = json.loads(out.strip().splitlines()[-1]) if child.returncode == 0 else None
        except (ValueError, IndexError):
            stats = None
        if stats is None:
            tail = (err or "").strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
            ctx.note(f"the CUPTI decoder process failed ({tail[0]}); decoding in this process instead")
            stats = decoder.decode_run(Path(ctx.run_path)).get(int(ctx.rank or 0), {})
        return _stats(ctx, stats)


def _stats(ctx: CollectorContext, stats: dict[str, Any]) -> CollectorStats:
    """The decoding statistics as collector stats; their warnings become notes."""
    for w in stats.get("warnings", []):
        ctx.note(str(w))
    out = CollectorStats(details={"cupti_decode": stats})
    if stats.get("damaged"):
        out.dropped["cupti_segments"] = int(stats["damaged"])
    return out


def _child_env(ctx: CollectorContext) -> dict[str, str]:
    """The child decoder's environment: the recording process's, without perfscope's
    recording variables and NVTX's injection (it records nothing), with this process's
    import path."""
    env = {k: v for k, v in ctx.env.items() if not k.startswith("PERFSCOPE_") and k != "NVTX_INJECTION64_PATH"}
    path = [p for p in sys.path if p]
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


__all__ = ["CuptiDecoding"]
