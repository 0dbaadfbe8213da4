"""Overhead of the whole recorder users run (`perfscope record`), next to torch.profiler.

    python benchmarks/recorder_overhead.py [--rounds 10] [--launches 10000] [--steps 20] \\
        [--run-steps 500] [--schedule wait=50,warmup=2,active=5,repeat=0] [--pairs 20] [--out DIR]

Method.  Every arm is a separate process running the same worker (this file with
``--worker``): the tiny-kernel loop (``x.add_(1)`` on a 1-element tensor; microseconds per
launch, the fastest of 5 blocks) and then the 8-layer transformer-encoder training step
of ``benchmarks/overhead.py`` (each step synchronised; median ms).  Arms:

* ``none``: no profiler, ``--run-steps`` steps (its median step and its whole loop time
  are the reference of its round);
* ``record``: ``perfscope record`` with its defaults, ``--steps`` steps;
* ``sched``: ``perfscope record --schedule SCHEDULE``, ``--run-steps`` steps: its whole
  loop time against ``none``'s is the whole-run slowdown; its tiny loop runs before the
  first window (no optimizer step yet), so it measures what a paused recorder costs;
* ``torch_cuda``: ``torch.profiler.profile(activities=[CUDA])`` around both loops, ``--steps`` steps;
* ``torch_default``: ``torch.profiler.profile()`` (CPU and CUDA activities, no schedule).

In each of ``--rounds`` rounds every arm runs once, in an order that rotates from round
to round; each arm's figure is the median over rounds of its value and of its difference
(and ratio) to the ``none`` process of the same round.  Only the loops are timed (process
start-up, the recorder's set-up and torch.profiler's trace processing are not), and the
worker reports its peak RSS (``ru_maxrss``) at the end of the loops: the extra host memory
of an arm is its peak minus ``none``'s.  For the ``perfscope record`` arms the run's rank
metadata gives the records dropped and the API-record source (``callback`` expected).

Then, as the floor and the in-process view, ``benchmarks/overhead.py --paired`` in two
fresh processes: ``perfscope`` (the defaults) and ``perfscope_kernel`` (CUPTI kernel
records only: the floor), then ``torch`` alone (torch.profiler keeps CUPTI's subscriber
slot after its first use, which would make later perfscope blocks fall back to the
activity API).

Prints a Markdown table and writes ``recorder_overhead.json`` to ``--out`` (or ``$OUT``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEDULE = "wait=50,warmup=2,active=5,repeat=0"
ARMS = ("none", "record", "sched", "torch_cuda", "torch_default")
WARM_STEPS = 5  # optimizer steps overhead.transformer_step takes before the timed ones


# ------------------------------------------------------------------- worker ----
def worker(args: argparse.Namespace) -> None:
    """Run both loops (under torch.profiler when asked) and write the figures to ``--json``."""
    import contextlib

    import torch

    sys.path.insert(0, str(HERE))
    from overhead import tiny_loop, transformer_step

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tiny = tiny_loop(torch, args.launches)
    tiny()  # warm: the first launches pay for module loading
    step = transformer_step(torch)
    ctx: Any = contextlib.nullcontext()
    if args.torch:
        from torch.profiler import ProfilerActivity, profile

        ctx = profile(activities=[ProfilerActivity.CUDA]) if args.torch == "cuda" else profile()
    with ctx:
        us = tiny()
        t0 = time.perf_counter()
        steps = [step() for _ in range(args.steps)]
        loop_s = time.perf_counter() - t0
        rss_loop = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"us_per_launch": us, "step_ms": statistics.median(steps), "loop_s": loop_s, "steps": args.steps, "step_list_ms": steps,
           "rss_start_kb": rss0, "rss_loop_kb": rss_loop,
           "rss_end_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    Path(args.json).write_text(json.dumps(out))


def cycle_worker(args: argparse.Namespace) -> None:
    """In-process, paired: blocks of one schedule cycle of transformer steps, recorded by
    ``perfscope.profile(schedule=...)`` (the whole recorder; ``prof.step()`` marks steps),
    by ``perfscope.profile()`` (every step), or not at all; start and stop are outside the
    timed blocks.  Writes the per-pair ratios to ``--json``."""
    import torch

    sys.path.insert(0, str(HERE))
    import perfscope
    from overhead import transformer_step

    step = transformer_step(torch)
    from perfscope._steps import Schedule

    sched = Schedule.parse(args.schedule)
    n = sched.wait + sched.warmup + (sched.record or 1)
    arms = {"profile_schedule": args.schedule, "profile_all": None}
    acc: dict[str, dict[str, list[float]]] = {a: {"ratios": [], "on": [], "off": []} for a in arms}
    tmp = Path(tempfile.mkdtemp(prefix="cycle-"))
    step_calls: list[float] = []

    def block(prof: Any) -> float:
        t0 = time.perf_counter()
        in_step = 0.0
        for _ in range(n):
            step()
            if prof is not None:
                t1 = time.perf_counter()
                prof.step()  # the recorder's own work at step boundaries (window changes included)
                in_step += time.perf_counter() - t1
        if prof is not None:
            step_calls.append(in_step)
        return time.perf_counter() - t0

    for i in range(args.cycle_pairs):
        for j, (arm, schedule) in enumerate(arms.items() if i % 2 == 0 else reversed(arms.items())):
            vals: dict[bool, float] = {}
            for on in ((True, False) if (i + j) % 2 == 0 else (False, True)):
                if not on:
                    vals[on] = block(None)
                    continue
                prof = perfscope.profile(tmp / f"{arm}-{i}", schedule=schedule, nccl=False, overwrite=True).start()
                vals[on] = block(prof)
                prof.stop()
                if i == 0:
                    acc[arm]["meta"] = _run_facts(tmp / f"{arm}-{i}")  # type: ignore[assignment]
                shutil.rmtree(tmp / f"{arm}-{i}", ignore_errors=True)
            acc[arm].setdefault("step_call_s", []).append(step_calls.pop())
            acc[arm]["ratios"].append(vals[True] / vals[False])
            acc[arm]["on"].append(vals[True])
            acc[arm]["off"].append(vals[False])
    Path(args.json).write_text(json.dumps({"steps_per_block": n, "arms": acc}))


def _run_facts(run: Path) -> dict[str, Any]:
    """Windows, drops and API source of a perfscope.profile run, and how many kernels lie
    outside its windows (each step synchronises, so none should; 1 ms of clock slack)."""
    import numpy as np

    import perfscope

    r = perfscope.open_run(run)
    meta = r.rank_meta(0)
    wins = [w for w in meta.get("windows") or [] if w.get("first_step") is not None]
    starts = r.table("kernels")["start_ns"].to_numpy(np.int64)
    inside = np.zeros(len(starts), bool)
    for w in wins:
        inside |= (starts >= w["start_ns"] - 1_000_000) & (starts <= (w["end_ns"] or 2**62) + 1_000_000)
    return {"windows": wins, "dropped": meta.get("dropped_events"), "kernels": int(len(starts)),
            "kernels_outside_windows": int((~inside).sum()) if wins else None,
            "api_source": ((meta.get("collector_stats") or {}).get("cupti") or {}).get("api_source")}


def cycle(args: argparse.Namespace) -> dict[str, Any]:
    """Run :func:`cycle_worker` in a fresh process; medians of its per-pair ratios."""
    res = Path(args.out) / "cycle.json"
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--cycle-worker", "--json", str(res),
                    "--cycle-pairs", str(args.cycle_pairs), "--schedule", args.schedule], check=True, timeout=600)
    data = json.loads(res.read_text())
    out: dict[str, Any] = {"steps_per_block": data["steps_per_block"]}
    for arm, a in data["arms"].items():
        q = statistics.quantiles(a["ratios"], n=4) if len(a["ratios"]) > 1 else [a["ratios"][0]] * 3
        out[arm] = {"ratio_median": statistics.median(a["ratios"]), "ratio_q1": q[0], "ratio_q3": q[2],
                    "on_median_s": statistics.median(a["on"]), "off_median_s": statistics.median(a["off"]),
                    "pairs": len(a["ratios"]), "meta": a.get("meta"),
                    "step_call_s_median": statistics.median(a["step_call_s"]) if a.get("step_call_s") else None}
        print(f"  cycle {arm:17s}: ratio median {out[arm]['ratio_median']:.4f} [IQR {q[0]:.4f} .. {q[2]:.4f}]", flush=True)
    return out


# ------------------------------------------------------------------- driver ----
def _arm_command(arm: str, args: argparse.Namespace, result: Path, run: Path) -> list[str]:
    steps = args.run_steps if arm in ("none", "sched") else args.steps
    me = [sys.executable, str(Path(__file__).resolve()), "--worker", "--json", str(result),
          "--launches", str(args.launches), "--steps", str(steps)]
    if arm.startswith("torch_"):
        return [*me, "--torch", arm.split("_", 1)[1]]
    if arm == "none":
        return me
    record = [sys.executable, "-m", "perfscope", "record", "-o", str(run), "--force"]
    if arm == "sched":
        record += ["--schedule", args.schedule]
    return [*record, "--", *me]


def _record_facts(run: Path) -> dict[str, Any]:
    """What the run says of itself: drops, API-record source, windows, CUPTI overhead."""
    try:
        meta = json.loads((run / "ranks" / "rank-0.json").read_text())
    except (OSError, ValueError) as e:
        return {"error": f"no rank metadata: {e}"}
    cupti = (meta.get("collector_stats") or {}).get("cupti") or {}
    windows = [w for w in meta.get("windows") or [] if w.get("first_step") is not None]
    return {
        "dropped_events": meta.get("dropped_events"), "api_source": cupti.get("api_source"),
        "cupti_dropped": cupti.get("dropped"), "kernels": (cupti.get("rows") or {}).get("kernels"),
        "windows": len(windows), "status": meta.get("status"), "warnings": meta.get("warnings"),
        "active_steps": [k for w in windows for k in range(w["first_step"], (w["last_step"] or w["first_step"]) + 1)],
        "decode_ns": (cupti.get("overhead") or {}).get("decode_ns"),
    }


def run_arm(arm: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    result, run = tmp / f"{arm}.json", tmp / f"{arm}.perfscope"
    result.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(_arm_command(arm, args, result, run), capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(f"arm {arm} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads(result.read_text())
    res["wall_s"] = wall
    if run.exists():
        res["record"] = _record_facts(run)
        shutil.rmtree(run, ignore_errors=True)
    return res


def cross_process(args: argparse.Namespace) -> dict[str, Any]:
    """Every arm in a fresh process, ``--rounds`` rounds in rotating order (starting at
    round ``--first-round``, so a run split over several calls keeps the rotation)."""
    arms = [a for a in ARMS if a in args.arms.split(",")]
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="recorder-overhead-") as d:
        for r in range(args.first_round, args.first_round + args.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            res = {a: run_arm(a, args, Path(d)) for a in order}
            rounds.append(res)
            print(f"  round {r}: " + ", ".join(
                f"{a} {v['us_per_launch']:.2f}us {v['step_ms']:.2f}ms {v['loop_s']:.2f}s ({v['wall_s']:.1f}s)"
                for a, v in res.items()), flush=True)
    return summarize(rounds, arms)


def summarize(rounds: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Per arm, medians over rounds of its figures and of their difference and ratio to the
    same round's ``none`` process (``us_per_launch``, ``step_ms``, ``*_delta``, ``*_ratio``,
    ``*_ratio_range``; for ``sched`` the whole loop's ratio and its active steps), extra peak
    RSS in MB, and what the recordings say of themselves (API source, drops, windows)."""
    out: dict[str, Any] = {"rounds": rounds, "arms": {}}
    for a in arms:
        vals = [rd[a] for rd in rounds]
        ref = [rd["none"] for rd in rounds]
        fig: dict[str, Any] = {}
        for key in ("us_per_launch", "step_ms"):
            fig[key] = statistics.median(v[key] for v in vals)
            fig[key + "_delta"] = statistics.median(v[key] - n[key] for v, n in zip(vals, ref))
            fig[key + "_ratio"] = statistics.median(v[key] / n[key] for v, n in zip(vals, ref))
            fig[key + "_ratio_range"] = [min(v[key] / n[key] for v, n in zip(vals, ref)),
                                         max(v[key] / n[key] for v, n in zip(vals, ref))]
        if a == "sched":
            ratios = [v["loop_s"] / n["loop_s"] for v, n in zip(vals, ref)]
            fig["whole_run_ratio"] = statistics.median(ratios)
            fig["whole_run_ratio_range"] = [min(ratios), max(ratios)]
            # the active steps alone (the recorder's step k is the worker's timed step k - WARM_STEPS)
            act = [[v["step_list_ms"][k - WARM_STEPS] for k in v["record"]["active_steps"]
                    if 0 <= k - WARM_STEPS < len(v["step_list_ms"])] for v in vals]
            if all(act):
                fig["active_step_ms"] = statistics.median(statistics.median(x) for x in act)
                fig["active_step_ms_ratio"] = statistics.median(
                    statistics.median(x) / n["step_ms"] for x, n in zip(act, ref))
        fig["extra_rss_mb"] = statistics.median((v["rss_loop_kb"] - n["rss_loop_kb"]) / 1024 for v, n in zip(vals, ref))
        fig["extra_rss_end_mb"] = statistics.median((v["rss_end_kb"] - n["rss_end_kb"]) / 1024 for v, n in zip(vals, ref))
        fig["wall_s"] = statistics.median(v["wall_s"] for v in vals)
        facts = [v["record"] for v in vals if "record" in v]
        if facts:
            fig["api_sources"] = sorted({str(f.get("api_source")) for f in facts})
            fig["dropped_max"] = max(sum((f.get("dropped_events") or {}).values()) for f in facts)
            fig["windows"] = sorted({f.get("windows") for f in facts})
        out["arms"][a] = fig
    return out


def paired(args: argparse.Namespace) -> dict[str, Any]:
    """benchmarks/overhead.py --paired in fresh processes: perfscope + kernels-only, then torch."""
    res: dict[str, Any] = {}
    for name, arms in (("cupti", "perfscope,perfscope_kernel,perfscope_paused"), ("torch", "torch")):
        out = Path(args.out) / f"paired_{name}"
        subprocess.run([sys.executable, str(HERE / "overhead.py"), "--paired", "--pairs", str(args.pairs),
                        "--small-step", "--arms", arms, "--out", str(out)], check=True, timeout=600)
        data = json.loads((out / "overhead.json").read_text())["paired"]
        res.update({f"{workload}/{arm}": v for workload, per_arm in data.items() for arm, v in per_arm.items()})
    return res


def table(cross: dict[str, Any], pair: dict[str, Any], cyc: dict[str, Any]) -> str:
    """The Markdown table of benchmarks/README.md."""
    rows = ["| arm | µs per tiny launch (Δ vs none) | step ms (Δ, ratio) | whole run | extra peak RSS | API records | dropped |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for a, f in cross["arms"].items():
        whole = f"{f['whole_run_ratio']:.4f} [{f['whole_run_ratio_range'][0]:.3f} .. {f['whole_run_ratio_range'][1]:.3f}]" \
            if "whole_run_ratio" in f else ""
        if "active_step_ms" in f:
            whole += f"; active steps {f['active_step_ms']:.2f} ms ({f['active_step_ms_ratio']:.3f})"
        rows.append(f"| {a} | {f['us_per_launch']:.2f} ({f['us_per_launch_delta']:+.2f}) | {f['step_ms']:.2f} "
                    f"({f['step_ms_delta']:+.2f}, {f['step_ms_ratio']:.3f}) | {whole} | {f['extra_rss_mb']:+.0f} MB | "
                    f"{','.join(f.get('api_sources', [])) or ''} | {f.get('dropped_max', '')} |")
    rows += ["", "| in-process, paired | tiny: Δ µs/launch (ratio) | step: Δ ms (ratio) | small step: Δ µs (ratio) "
             "| API records |", "| --- | --- | --- | --- | --- |"]
    for arm in ("perfscope", "perfscope_kernel", "perfscope_paused", "torch"):
        t, s = pair.get(f"tiny_us_per_launch/{arm}"), pair.get(f"transformer_step_ms/{arm}")
        m = pair.get(f"small_step_ms/{arm}")
        small = f"{m['delta_median'] * 1e3:+.0f} ({m['ratio_median']:.3f})" if m else ""
        if t and s:
            rows.append(f"| {arm} | {t['delta_median']:+.2f} ({t['ratio_median']:.3f}) | {s['delta_median']:+.2f} "
                        f"({s['ratio_median']:.3f}) | {small} | {t.get('api_source') or ''} |")
    if cyc:
        rows += ["", f"| in-process, paired blocks of {cyc['steps_per_block']} steps | ratio, median [IQR] | API records | "
                 "windows | kernels (outside windows) | dropped |", "| --- | --- | --- | --- | --- | --- |"]
        for arm in ("profile_schedule", "profile_all"):
            c = cyc.get(arm)
            if c:
                meta = c.get("meta") or {}
                wins = [(w["first_step"], w["last_step"]) for w in meta.get("windows") or []]
                rows.append(f"| {arm} | {c['ratio_median']:.4f} [{c['ratio_q1']:.4f} .. {c['ratio_q3']:.4f}] | "
                            f"{meta.get('api_source') or ''} | {wins or ''} | {meta.get('kernels')} "
                            f"({meta.get('kernels_outside_windows')}) | {sum((meta.get('dropped') or {}).values())} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--launches", type=int, default=10000)
    ap.add_argument("--steps", type=int, default=20, help="transformer steps of the record and torch arms")
    ap.add_argument("--run-steps", type=int, default=500, help="transformer steps of the none and sched arms")
    ap.add_argument("--schedule", default=SCHEDULE)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--pairs", type=int, default=20, help="pairs of the in-process arms (0: skip them)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--cycle-pairs", type=int, default=8, help="pairs of one-cycle blocks in one process (0: skip)")
    ap.add_argument("--first-round", type=int, default=0,
                    help="number of the first round (to split the rounds over several calls and --merge them)")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="summarise the rounds (and paired and cycle stages) of earlier runs' recorder_overhead.json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cycle-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    ap.add_argument("--torch", choices=["cuda", "default"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.cycle_worker:
        cycle_worker(args)
        return 0
    if "none" not in args.arms.split(","):
        raise SystemExit("--arms must include none: every figure is relative to it")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.merge:
        return merge(args)
    t0 = time.time()
    result: dict[str, Any] = {"args": vars(args), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
                              "cycle": {}, "paired": {}, "cross_process": {"arms": {}}}
    # most telling first; the file is rewritten after each stage, so a run cut short keeps what it measured
    for key, stage, wanted in (("cycle", cycle, args.cycle_pairs), ("paired", paired, args.pairs),
                               ("cross_process", cross_process, args.rounds)):
        if wanted:
            result[key] = stage(args)
            result["seconds"] = time.time() - t0
            (Path(args.out) / "recorder_overhead.json").write_text(json.dumps(result, indent=1, default=str))
    print()
    print(table(result["cross_process"], result["paired"], result["cycle"]))
    return 0


def merge(args: argparse.Namespace) -> int:
    """Summarise the cross-process rounds of several runs as one (each stage's other parts
    taken from the last file that has them) into ``--out``/recorder_overhead.json."""
    parts = [json.loads(Path(f).read_text()) for f in args.merge]
    rounds = [rd for p in parts for rd in p["cross_process"].get("rounds", [])]
    arms = [a for a in ARMS if rounds and all(a in rd for rd in rounds)]
    result: dict[str, Any] = {"merged": list(args.merge), "cycle": {}, "paired": {},
                              "cross_process": summarize(rounds, arms) if rounds else {"arms": {}}}
    for p in parts:
        for key in ("cycle", "paired"):
            if p.get(key):
                result[key] = p[key]
    (Path(args.out) / "recorder_overhead.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"{len(rounds)} rounds from {len(parts)} files")
    print(table(result["cross_process"], result["paired"], result["cycle"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
