"""What the NVML sampler records and what it costs, on a real GPU.

Method
    Two phases of ``--seconds`` each, into a fresh run's ``metrics`` table:

    * idle: the main thread sleeps while :class:`NvmlSampler` samples every GPU at
      ``--interval``; the process's CPU time over the phase is the sampler's cost.
    * load (when torch sees a GPU): the main thread runs bf16 matmuls on GPU 0, so
      utilisation, power, clocks and PCIe counters move.

    Reported per phase: rows per metric, the median and p99 gap between consecutive
    ``sm_util_pct`` samples of GPU 0, the sampler's own loop timing (mean, p99, max),
    CPU seconds per wall second (idle phase), and per-metric min/max values.

Run:  python benchmarks/nvml_sampler.py [--seconds 3] [--interval 0.1] [--json OUT.json]
Prints one JSON document (and writes it to --json when given).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perfscope.collectors.host.nvml import NvmlSampler
from perfscope.store import RankWriter, create_run, open_run


def _phase(run: Path, rank: int, seconds: float, interval: float, load: bool) -> dict[str, Any]:
    create_run(run / f"phase{rank}")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with RankWriter(run / f"phase{rank}", rank) as w:
        sampler = NvmlSampler(w, interval_s=interval).start()
        if load:
            _matmuls(seconds)
        else:
            time.sleep(seconds)
        stats = sampler.stop()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    df = open_run(run / f"phase{rank}").table("metrics")
    out: dict[str, Any] = {"phase": "load" if load else "idle", "wall_s": round(wall, 3), "stats": stats}
    if not load:
        out["cpu_s_per_wall_s"] = round(cpu / wall, 4)
    if len(df):
        df["metric"] = df["metric"].astype(str)
        out["rows_per_metric"] = df.groupby("metric").size().to_dict()
        out["value_range"] = {m: [float(g.min()), float(g.max())] for m, g in df.groupby("metric")["value"]}
        ts = df[(df["device"] == df["device"].min()) & (df["metric"] == "sm_util_pct")]["ts_ns"].sort_values()
        gaps = ts.diff().dropna() / 1e6
        if len(gaps):
            out["gap_ms_median"] = round(float(gaps.median()), 3)
            out["gap_ms_p99"] = round(float(gaps.quantile(0.99)), 3)
    return out


def _matmuls(seconds: float) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    host = torch.empty(64 << 20, dtype=torch.uint8, pin_memory=True)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a = (a @ b) * 1e-3
        # Some host-to-device traffic so the PCIe counters have something to show.
        host.to("cuda", non_blocking=True)
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    """Run both phases and print the JSON document; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    try:
        import torch

        gpu = bool(torch.cuda.is_available())
    except ImportError:
        gpu = False
    with tempfile.TemporaryDirectory() as tmp:
        phases = [_phase(Path(tmp), 0, args.seconds, args.interval, load=False)]
        if gpu:
            phases.append(_phase(Path(tmp), 1, args.seconds, args.interval, load=True))
    doc = {"interval_s": args.interval, "seconds": args.seconds, "phases": phases}
    text = json.dumps(doc, indent=1, default=str)
    if args.json:
        args.json.write_text(text)
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
