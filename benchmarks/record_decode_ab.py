"""Out-of-process against in-process CUPTI decoding, as `perfscope record` users run it.

Each arm runs the tiny-kernel loop (``x.add_(1)`` on a 1-element tensor) in a fresh
process: without a profiler, under ``perfscope record`` with the default out-of-process
decoding, and under ``perfscope record`` with ``PERFSCOPE_CUPTI_DECODE=inprocess`` (the
training process decodes at each flush, as before issue 16).  Arms are interleaved
round by round.  Per launch: the whole timed loop's mean (it spans several flushes, so a
decoder sharing the GIL shows) and the median of 0.25 s blocks.  The training process
also reports its peak resident memory (``ru_maxrss``) and the sink's own counters come
from the run's rank file.

    python benchmarks/record_decode_ab.py --rounds 3 --seconds 4 --out DIR   # on a GPU machine
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = r'''
import json, resource, sys, time
import torch
x = torch.zeros(1, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
seconds, blocks, n = float(sys.argv[2]), [], 0
t_end = time.perf_counter() + seconds
t0 = time.perf_counter()
while time.perf_counter() < t_end:
    b0, k = time.perf_counter(), 0
    while time.perf_counter() - b0 < 0.25:
        for _ in range(200):
            x.add_(1)
        k += 200
    torch.cuda.synchronize()
    blocks.append((time.perf_counter() - b0) / k * 1e6)
    n += k
total = (time.perf_counter() - t0) / n * 1e6
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
json.dump({"mean_us": total, "median_block_us": sorted(blocks)[len(blocks) // 2], "launches": n,
           "maxrss_kb_before": rss0, "maxrss_kb": rss1}, open(sys.argv[1], "w"))
'''

ARMS = {
    "none": ([], {}),
    "record": (["record"], {}),
    "record_inprocess": (["record"], {"PERFSCOPE_CUPTI_DECODE": "inprocess"}),
}


def run_arm(arm: str, work: Path, seconds: float, r: int) -> dict:
    """One process of ``arm``; returns the loop's result plus the sink's counters."""
    res = work / f"{arm}-{r}.json"
    script = work / "loop.py"
    script.write_text(LOOP)
    prefix, extra = ARMS[arm]
    cmd = [sys.executable, str(script), str(res), str(seconds)]
    run = work / f"{arm}-{r}.perfscope"
    if prefix:
        cmd = [sys.executable, "-m", "perfscope", "record", "-o", str(run), "--force", "--no-nccl", "--no-nvml", "--", *cmd]
    env = {**os.environ, **extra}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{arm}: {proc.stderr[-2000:]}")
    out = json.loads(res.read_text())
    if prefix:
        rank = json.loads((run / "ranks" / "rank-0.json").read_text())
        cupti = (rank.get("collector_stats") or {}).get("cupti", {})
        out["cupti"] = {k: cupti.get(k) for k in ("dropped", "memory", "segments", "rows", "overhead", "api_source")}
        out["cupti_decode"] = rank.get("cupti_decode") or (rank.get("collector_stats") or {}).get("cupti_decode")
        if out["cupti_decode"]:
            out["cupti_decode"] = {k: out["cupti_decode"].get(k) for k in ("segments", "rows", "decode_ns", "damaged")}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    results: dict[str, list[dict]] = {a: [] for a in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(ARMS) if r % 2 == 0 else list(reversed(ARMS))
            for arm in order:
                results[arm].append(run_arm(arm, Path(tmp), args.seconds, r))
    summary = {arm: {"mean_us": statistics.median(x["mean_us"] for x in rs),
                     "median_block_us": statistics.median(x["median_block_us"] for x in rs),
                     "maxrss_growth_kb": statistics.median(x["maxrss_kb"] - x["maxrss_kb_before"] for x in rs)}
               for arm, rs in results.items()}
    doc = {"rounds": args.rounds, "seconds": args.seconds, "summary": summary, "runs": results}
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "record_decode_ab.json").write_text(text)
    for arm, s in summary.items():
        print(f"{arm:18s} {s['mean_us']:7.2f} us/launch (mean)  {s['median_block_us']:7.2f} (median block)  "
              f"+{s['maxrss_growth_kb'] / 1024:.1f} MiB peak RSS during the loop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
