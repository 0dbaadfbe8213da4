"""Overhead of perfscope's CUPTI collector next to torch.profiler, in one process on one GPU.

    python benchmarks/overhead.py --paired [--pairs 30] [--arms perfscope,torch] [--out DIR]   # figures to quote
    python benchmarks/overhead.py [--rounds 10] [--launches 20000] [--steps 24] [--out DIR]

``--paired``: each pair runs one block with the recorder on and one without, back to
back in alternating order (start/stop outside the timed blocks); the figure is the
median of per-pair ratios (and differences).  The arms (``--arms``: ``perfscope``, the
defaults; ``perfscope_activity``, API records from CUPTI's RUNTIME activity kind;
``perfscope_noapi``, no API records; ``perfscope_kernel``, kernels only; ``torch``) take
turns within each round, so they are measured under the same host conditions.  This
resolves a few percent on a shared host where the interleaved rounds below cannot.

(a) tiny-kernel loop: microseconds per launch of ``x.add_(1)`` on a 1-element tensor;
(b) transformer training step: 8 encoder layers, d_model 1024, 16 heads, seq 512,
    batch 8, bf16 autocast, AdamW; median step time over ``--steps`` steps.

Arms: ``none``; ``torch`` (torch.profiler, CUDA activities only); ``perfscope`` (the
CuptiCollector with its default kinds, writing a real run through a RankWriter that
writes Parquet every second, with a background thread calling flush() every 0.5 s, so
that decoding and writing fall inside the timed region even for sub-second arms; a real
run flushes every 2 s); in (a) also ``perfscope_kernel`` (kernels only).  In every round each profiled arm runs once, in
an order that rotates from round to round, with a ``none`` run before and after it:
identical runs differ by ~12% between processes and drift within one, so each profiled
run is compared with the mean of its two ``none`` neighbours.  Reported: per arm the
median over rounds (and min/max) and the median of the per-round ratios to ``none``
(the overhead figure); ``delta`` is median value x (1 - 1/median ratio).
Prints a table and writes ``overhead.json`` (to ``--out`` or ``$OUT``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


FLUSH_EVERY_S = 0.5


# ------------------------------------------------------------------------ arms ----
@contextmanager
def arm_none() -> Iterator[dict]:
    yield {}


@contextmanager
def arm_torch() -> Iterator[dict]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]):
        yield {}


def make_perfscope_arm(kinds: tuple[str, ...] | None) -> Callable[[], Any]:
    @contextmanager
    def arm() -> Iterator[dict]:
        from perfscope.collectors.cupti import DEFAULT_KINDS, CuptiCollector
        from perfscope.store import RankWriter, create_run

        tmp = tempfile.mkdtemp(prefix="perfscope-bench-")
        create_run(tmp, command=["benchmark"], overwrite=True)
        writer = RankWriter(tmp, 0, flush_interval_s=1.0)
        writer.start_background_flush()
        coll = CuptiCollector(writer, kinds=kinds or DEFAULT_KINDS)
        coll.start()
        stop = threading.Event()

        def flusher() -> None:
            while not stop.wait(FLUSH_EVERY_S):
                coll.flush()

        t = threading.Thread(target=flusher, daemon=True)
        t.start()
        info: dict = {}
        try:
            yield info
        finally:
            stop.set()
            t.join()
            stats = coll.stop()
            writer.close()
            info["stats"] = stats
            info["kernels"] = stats["rows"].get("kernels", 0)

    return arm


# ------------------------------------------------------------------- workloads ----
def tiny_loop(torch: Any, launches: int, reps: int = 5) -> Callable[[], float]:
    """Microseconds per launch: the fastest of ``reps`` blocks of ``launches / reps``
    launches (the minimum discards blocks hit by a preemption on this shared host)."""
    x = torch.zeros(1, device="cuda")
    per = max(1, launches // reps)

    def block() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(per):
            x.add_(1)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / per * 1e6

    def run() -> float:
        return min(block() for _ in range(reps))

    return run


def transformer(torch: Any, steps: int, enqueue: bool = False, small: bool = False) -> Callable[[], float]:
    """Median milliseconds per training step over ``steps`` steps (each synchronised), or
    with ``enqueue`` the median host time to launch a step's work (see :func:`transformer_step`).
    With ``small``, the same step on tiny shapes and the *fastest* of the steps: see
    :func:`transformer_step`."""
    one = transformer_step(torch, enqueue, small)

    def run() -> float:
        times = [one() for _ in range(steps)]
        return min(times) if small else statistics.median(times)

    return run


def transformer_step(torch: Any, enqueue: bool = False, small: bool = False) -> Callable[[], float]:
    """One synchronised training step of the 8-layer encoder (after 5 warm-up steps): its ms,
    or with ``enqueue`` the ms from its start until its last launch returned (before the
    synchronisation; on the H200 the step is bound by the host, enqueue time close to the step).

    ``small`` builds the same model on tiny shapes (width 64, batch 2 x 16 tokens): the same
    ~600 kernels and the same API calls per step (cuBLAS, memsets, copies), each kernel
    microseconds long, so the step is the host's launch work alone and the fastest of a few
    steps resolves a fraction of a microsecond per launch, which the full step's spread on a
    shared host (about +-10 %) cannot."""
    import torch.nn as nn

    torch.manual_seed(0)
    width, heads, ff, batch, seq = (64, 4, 128, 2, 16) if small else (1024, 16, 4096, 8, 512)
    layer = nn.TransformerEncoderLayer(width, heads, ff, dropout=0.1, batch_first=True)
    model = nn.TransformerEncoder(layer, 8, enable_nested_tensor=False).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, width, device="cuda")

    def one() -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x)
        loss = y.float().pow(2).mean()
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return ((t1 if enqueue else time.perf_counter()) - t0) * 1e3  # ms

    for _ in range(5):
        one()
    return one


# ---------------------------------------------------------------------- driver ----
def measure(name: str, work: Callable[[], float], arms: dict[str, Callable[[], Any]], rounds: int) -> dict:
    """Interleave the arms ``rounds`` times; ``none`` runs between every two profiled arms.

    Each profiled arm's ratio is its value over the mean of the two ``none`` runs around
    it (so slow drift of the host cancels); the order of the profiled arms rotates.
    """
    profiled = [a for a in arms if a != "none"]
    per_round: list[dict[str, Any]] = []
    extra: dict[str, list] = {a: [] for a in arms}
    for r in range(rounds):
        order = profiled[r % len(profiled):] + profiled[:r % len(profiled)]
        with arms["none"]():
            prev_none = work()
        res: dict[str, Any] = {"none": [prev_none]}
        for a in order:
            with arms[a]() as info:
                val = work()
            with arms["none"]():
                next_none = work()
            res["none"].append(next_none)
            res[a] = val
            res[a + "/none"] = val / ((prev_none + next_none) / 2)
            prev_none = next_none
            extra[a].append({k: v for k, v in info.items() if k != "stats"})
            if "stats" in info and r == rounds - 1:
                extra[a][-1]["stats"] = info["stats"]
        per_round.append(res)
        print(f"  {name} round {r}: none=" + "/".join(f"{v:.3f}" for v in res["none"]) + ", "
              + ", ".join(f"{a}={res[a]:.3f} ({res[a + '/none']:.3f})" for a in profiled), flush=True)
    out: dict[str, Any] = {"rounds": per_round, "arms": {}}
    nones = [v for p in per_round for v in p["none"]]
    out["arms"]["none"] = {"median": statistics.median(nones), "min": min(nones), "max": max(nones),
                           "ratio_median": 1.0, "ratio_min": 1.0, "ratio_max": 1.0, "delta_median": 0.0}
    for a in profiled:
        vals = [p[a] for p in per_round]
        ratios = [p[a + "/none"] for p in per_round]
        out["arms"][a] = {
            "median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ratio_mean": statistics.fmean(ratios),
            "delta_median": statistics.median(vals) * (1 - 1 / statistics.median(ratios)),
            "info": extra[a],
        }
    return out


class _CountingWriter:
    """Stands in for a RankWriter in the paired runs: counts rows, writes nothing."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}

    def append(self, table: str, batch: Any) -> None:
        self.rows[table] = self.rows.get(table, 0) + batch.num_rows


#: the --paired arms: name -> CuptiCollector keyword arguments (None: torch.profiler)
PAIRED_ARMS: dict[str, dict[str, Any] | None] = {
    "perfscope": {},  # the defaults: what `perfscope record` and perfscope.profile use
    "perfscope_activity": {"api_source": "activity"},  # API records from CUPTI's RUNTIME/DRIVER kinds
    "perfscope_nouvm": {"kinds": ("kernel", "memcpy", "memset", "sync", "runtime", "driver", "nvtx")},
    "perfscope_lean": {"kinds": ("kernel", "memcpy", "memset", "sync", "runtime", "driver")},  # no NVTX, no UVM
    "perfscope_runtime": {"kinds": ("kernel", "memcpy", "memset", "sync", "runtime", "nvtx")},  # no driver calls
    "perfscope_noapi": {"kinds": ("kernel", "memcpy", "memset", "sync", "nvtx")},
    "perfscope_kernel": {"kinds": ("kernel",)},
    "perfscope_paused": {"_paused": True},  # the defaults, paused as between a schedule's windows
    "torch": None,
}


def paired(name: str, block: Callable[[], float], arms: list[str], pairs: int) -> dict:
    """Paired blocks, all arms interleaved: in each round every arm (in an order that
    rotates from round to round) runs one block recording and one without, back to back
    (which goes first alternates); each arm's figure is the median of its per-pair ratios
    and of its per-pair differences.  Arms measured in the same rounds see the same state
    of the shared host, so their figures can be compared with each other.

    Starting and stopping the recorder (and torch.profiler's trace processing) happen
    outside the timed blocks; perfscope's decode time is reported next to the block time
    so that its share can be added (in a real run it happens on a background thread).
    """
    from perfscope.collectors.cupti import CuptiCollector

    acc = {a: {"ratios": [], "on": [], "off": [], "deltas": [], "decode_ns": 0, "sink_ns": 0, "records": 0,
               "on_ns": 0, "api_source": None} for a in arms}
    for i in range(pairs):
        order = arms[i % len(arms):] + arms[:i % len(arms)]
        for j, arm in enumerate(order):
            a = acc[arm]
            vals: dict[bool, float] = {}
            for on in ((True, False) if (i + j) % 2 == 0 else (False, True)):
                if not on:
                    vals[on] = block()
                    continue
                kw = PAIRED_ARMS[arm]
                if kw is None:
                    with arm_torch():
                        t0 = time.perf_counter_ns()
                        vals[on] = block()
                        a["on_ns"] += time.perf_counter_ns() - t0
                    continue
                coll = CuptiCollector(_CountingWriter(), **{k: v for k, v in kw.items() if k != "_paused"})
                coll.start()
                if kw.get("_paused"):
                    coll.pause()
                t0 = time.perf_counter_ns()
                vals[on] = block()
                a["on_ns"] += time.perf_counter_ns() - t0
                st = coll.stop()
                a["decode_ns"] += st["overhead"]["decode_ns"]
                a["sink_ns"] += st["overhead"]["sink_callback_ns"]
                a["records"] += sum(v["kept"] for v in st["records"].values())
                a["api_source"] = st.get("api_source")
                a["last_records"] = {k: v["kept"] for k, v in st["records"].items()}
            a["ratios"].append(vals[True] / vals[False])
            a["on"].append(vals[True])
            a["off"].append(vals[False])
            a["deltas"].append(vals[True] - vals[False])
    out: dict[str, Any] = {}
    for arm, a in acc.items():
        q = statistics.quantiles(a["ratios"], n=4)
        r = {
            "pairs": pairs, "ratio_median": statistics.median(a["ratios"]), "ratio_q1": q[0], "ratio_q3": q[2],
            "on_median": statistics.median(a["on"]), "off_median": statistics.median(a["off"]),
            "delta_median": statistics.median(a["deltas"]), "ratios": a["ratios"], "deltas": a["deltas"],
        }
        if PAIRED_ARMS[arm] is not None and a["on_ns"]:
            r.update({"decode_share": a["decode_ns"] / a["on_ns"], "sink_share": a["sink_ns"] / a["on_ns"],
                      "decode_ns_per_record": a["decode_ns"] / max(a["records"], 1),
                      "records_per_block": a["records"] / pairs, "api_source": a["api_source"],
                      "last_block_records": a.get("last_records")})
        out[arm] = r
        print(f"  paired {name} {arm:18s}: ratio median {r['ratio_median']:.4f} [IQR {r['ratio_q1']:.4f} .. "
              f"{r['ratio_q3']:.4f}], on {r['on_median']:.3f} off {r['off_median']:.3f} "
              f"delta {r['delta_median']:+.3f}" + (f", decode share {r['decode_share']:.3%}" if "decode_share" in r else ""),
              flush=True)
    return out


def run_paired(torch: Any, args: argparse.Namespace, result: dict[str, Any]) -> None:
    x = torch.zeros(1, device="cuda")

    def tiny_block() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(2000):
            x.add_(1)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / 2000 * 1e6

    for _ in range(5):
        tiny_block()
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in PAIRED_ARMS]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; choose from {list(PAIRED_ARMS)}")
    res: dict[str, Any] = {}
    if "tiny" not in args.skip:
        res["tiny_us_per_launch"] = paired("tiny", tiny_block, arms, args.pairs)
    if "transformer" not in args.skip:
        step = transformer(torch, 4)  # median of 4 steps per block
        res["transformer_step_ms"] = paired("step", step, arms, max(args.pairs // 2, 6))
        if args.enqueue:
            enq = transformer(torch, 4, enqueue=True)
            res["transformer_enqueue_ms"] = paired("enqueue", enq, arms, max(args.pairs // 2, 6))
    if args.small_step:
        small = transformer(torch, 8, small=True)  # fastest of 8 steps per block
        res["small_step_ms"] = paired("small step", small, arms, args.pairs)
    result["paired"] = res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--skip", choices=["tiny", "transformer"], action="append", default=[])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--paired", action="store_true", help="paired on/off blocks instead of interleaved rounds")
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--small-step", action="store_true",
                    help="--paired: also the step on tiny shapes (per-launch cost with the step's API mix)")
    ap.add_argument("--enqueue", action="store_true",
                    help="--paired: also the host's time to launch a step (less noisy than the step)")
    ap.add_argument("--arms", default="perfscope,torch",
                    help=f"--paired: comma-separated arms, from {','.join(PAIRED_ARMS)}")
    args = ap.parse_args(argv)
    import torch

    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "args": vars(args), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        from importlib.metadata import version

        result["cupti_python"] = version("cupti-python")
    except Exception:  # noqa: BLE001
        pass
    if args.paired:
        run_paired(torch, args, result)
        args.skip = ["tiny", "transformer"]
    if "tiny" not in args.skip:
        arms = {"none": arm_none, "torch": arm_torch, "perfscope": make_perfscope_arm(None),
                "perfscope_kernel": make_perfscope_arm(("kernel",))}
        run = tiny_loop(torch, args.launches)
        for _ in range(3):
            run()
        result["tiny_us_per_launch"] = measure("tiny", run, arms, args.rounds)
    if "transformer" not in args.skip:
        arms = {"none": arm_none, "torch": arm_torch, "perfscope": make_perfscope_arm(None)}
        run = transformer(torch, args.steps)
        result["transformer_step_ms"] = measure("step", run, arms, args.rounds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(json.dumps(result, indent=1, default=str))
    print()
    for key, unit in (("tiny_us_per_launch", "us/launch"), ("transformer_step_ms", "ms/step")):
        if key not in result:
            continue
        print(f"{key} ({unit}; median over {args.rounds} rounds; ratio = arm / mean of its two none neighbours)")
        for a, v in result[key]["arms"].items():
            print(f"  {a:17s} median {v['median']:9.3f}  [{v['min']:.3f} .. {v['max']:.3f}]  "
                  f"delta {v['delta_median']:+8.3f}  ratio {v['ratio_median']:.4f} [{v['ratio_min']:.4f} .. {v['ratio_max']:.4f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
