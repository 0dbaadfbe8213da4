"""What CUPTI still costs the training step once perfscope's collector is paused or stopped.

    python benchmarks/pause_cost.py [--kinds default|nouvm|kernel] [--detach | --finalize] [--uvm auto|always|off]
                                    [--uvm-left-on] [--blocks 4] [--steps 10]

In one process, the 8-layer transformer step of ``overhead.py`` is timed in phases, each
``--blocks`` blocks of the median of ``--steps`` steps: ``before`` (CUPTI never used),
``active`` (the collector recording), ``paused`` (:meth:`CuptiCollector.pause`, as between
a schedule's windows), ``stopped`` (after :meth:`CuptiCollector.stop`, which disables every
kind and unsubscribes but does not call ``cuptiFinalize``).  With ``--finalize``, then
``finalized`` (after ``cupti.finalize()``), ``active_again`` (a new collector after the
finalize: does CUPTI come back, and does it record?) and ``torch_after`` (whether
torch.profiler still records GPU events in this process afterwards).  With ``--detach`` the
collector does it itself (``CuptiCollector(detach=True)``, what ``perfscope record`` does by
default): ``paused`` is then CUPTI finalized by :meth:`pause`, followed by
``resumed`` (attached again by :meth:`resume`; its records are counted) and ``stopped``; the
detach at pause is timed by part (GPU synchronise, the sink's forced flush, Unified Memory
counters off, unsubscribe, ``cuptiFinalize``).  ``--uvm always`` arms the Unified Memory
counters at once (the job allocates no managed memory: ``auto`` never arms them), and
``--uvm-left-on`` leaves them on for ``cuptiFinalize`` to tear down.

Prints one line per phase (median step ms of its blocks, ratio to ``before``) and writes
``pause_cost_<kinds>.json`` to ``--out`` (or ``$OUT``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KINDS = {
    "default": None,
    "nouvm": ("kernel", "memcpy", "memset", "sync", "runtime", "driver", "nvtx"),
    "kernel": ("kernel",),
}


def _time_detach_parts(coll: Any, uvm_left_on: bool = False) -> dict[str, float]:
    """Wrap the calls a detach makes (GPU synchronise, the sink's forced flush, the Unified
    Memory counters off, giving the subscriber slot back, ``cuptiFinalize``) in timers;
    returns the dict they add ms to."""
    import time

    from cupti import cupti

    from perfscope.collectors.cupti import attach

    parts: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                parts[name] = parts.get(name, 0.0) + (time.perf_counter_ns() - t0) / 1e6
        return wrapper

    attach.sync_current_context = timed("synchronize", attach.sync_current_context)
    coll._sink.flush = timed("sink_flush", coll._sink.flush)
    coll._sink.set_detached = timed("set_detached", coll._sink.set_detached)
    if coll._uvm is not None and uvm_left_on:
        def leave_on() -> None:  # the experiment: leave the armed counters to cuptiFinalize
            coll._uvm._stop.set()
            coll._uvm.enabled = False
        coll._uvm.stop = leave_on
    if coll._uvm is not None:
        coll._uvm.stop = timed("uvm_counters_off", coll._uvm.stop)
    coll._sink.unsubscribe = timed("callback_unsubscribe", coll._sink.unsubscribe)
    cupti.unsubscribe = timed("cupti_unsubscribe", cupti.unsubscribe)
    cupti.finalize = timed("cuptiFinalize", cupti.finalize)
    return parts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", choices=list(KINDS), default="default")
    ap.add_argument("--finalize", action="store_true")
    ap.add_argument("--detach", action="store_true", help="the collector's own detach at pause and stop")
    ap.add_argument("--uvm", choices=("auto", "always", "off"), default="auto",
                    help="when the collector arms the Unified Memory counters (always: a detach is forced anyway, "
                         "to time it)")
    ap.add_argument("--uvm-left-on", action="store_true",
                    help="with --uvm always: the detach leaves the counters on, to cuptiFinalize")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)

    import torch

    sys.path.insert(0, str(HERE))
    from overhead import _CountingWriter, transformer_step

    from perfscope.collectors.cupti import CuptiCollector

    step = transformer_step(torch)
    phases: dict[str, Any] = {}

    def phase(name: str) -> None:
        blocks = [statistics.median(step() for _ in range(args.steps)) for _ in range(args.blocks)]
        phases[name] = {"block_ms": blocks, "median_ms": statistics.median(blocks)}
        base = phases["before"]["median_ms"]
        print(f"  {args.kinds:8s} {name:13s} {phases[name]['median_ms']:7.2f} ms ({phases[name]['median_ms'] / base:.3f})",
              flush=True)

    kw: dict[str, Any] = {} if KINDS[args.kinds] is None else {"kinds": KINDS[args.kinds]}
    phase("before")
    coll = CuptiCollector(_CountingWriter(), detach=args.detach, uvm_counters=args.uvm, **kw)
    coll.start()
    phase("active")
    parts = _time_detach_parts(coll, args.uvm_left_on) if args.detach else {}
    if args.detach and args.uvm == "always":
        coll._may_detach = lambda: True  # detach with the counters armed (the collector avoids it) to time it
    coll.pause()
    if parts:
        phases["detach_parts_ms"] = dict(parts)
        print("  detach at pause, ms: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()), flush=True)
    phase("paused")
    phase("paused_later")
    if args.detach:
        coll.resume()
        phase("resumed")
    stats = coll.stop()
    phases["records_kept"] = {k: v["kept"] for k, v in stats["records"].items()}
    phases["detaches"] = stats.get("detaches")
    phases["detach_ms"], phases["attach_again_ms"] = stats.get("detach_ms"), stats.get("attach_again_ms")
    if args.detach:
        print(f"  {stats.get('detaches')} detaches (at pause and at stop); the one at pause took "
              f"{stats.get('detach_ms', 0):.1f} ms, attaching again "
              f"{stats.get('attach_again_ms', 0):.1f} ms", flush=True)
    phase("stopped")
    if args.finalize:
        from cupti import cupti

        torch.cuda.synchronize()
        cupti.finalize()
        phase("finalized")
        again = CuptiCollector(_CountingWriter(), **kw)
        again.start()
        phase("active_again")
        st = again.stop()
        phases["records_kept_again"] = {k: v["kept"] for k, v in st["records"].items()}
        torch.cuda.synchronize()
        cupti.finalize()
        phase("finalized_again")
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
        phases["torch_after_gpu_events"] = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
        print(f"  torch.profiler afterwards: {phases['torch_after_gpu_events']} GPU events", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pause_cost_{args.kinds}{'_detach' if args.detach else ''}.json").write_text(json.dumps(phases, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
