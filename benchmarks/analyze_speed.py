"""Analysis speed: perfscope ``import + analyze`` against HTA ``load + get_temporal_breakdown``.

Both sides run on the same Kineto trace, side by side in one invocation, each in a fresh
subprocess (so neither benefits from the other's page cache of Python objects), ``--repeat``
times; the median wall time, CPU time (process plus children, which is steadier on a shared
machine) and the peak RSS (the process and its children, e.g. HTA's parser pool) are
reported, with the ratios.

* perfscope: ``import_kineto(trace, run)`` then ``analyze_run(open_run(run))`` (the full
  analysis: steps, breakdown, GPU summary, kernels, collectives, rules), timed inside the
  child after ``import perfscope`` (interpreter start-up and module imports are reported
  separately as ``startup``); and, in a third child, ``analyze_run`` alone on the run
  imported before (the store is written once and analysed many times).
* HTA: ``TraceAnalysis(trace_dir=...)`` then ``get_temporal_breakdown(visualize=False)``,
  timed inside the child after ``import hta``; HTA runs from its own virtual environment
  (default ``/tmp/hta-venv``, created with ``pip install HolisticTraceAnalysis==0.5.0``).

Usage::

    python benchmarks/analyze_speed.py [--trace FILE] [--repeat 5] [--hta-python /tmp/hta-venv/bin/python] [--json]
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

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "kineto" / "ns_resolution_trace_rank-0.json.gz"

PERFSCOPE_CHILD = r"""
import json, resource, sys, time
def cpu():
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime
t0 = time.perf_counter()
from perfscope.store.kineto import import_kineto
from perfscope.store import open_run
from perfscope.analyzers import analyze_run
t1 = time.perf_counter(); c1 = cpu()
if sys.argv[3] == "import":
    import_kineto(sys.argv[1], sys.argv[2])
t2 = time.perf_counter()
a = analyze_run(open_run(sys.argv[2]))
t3 = time.perf_counter(); c3 = cpu()
g = a.gpu_summary.iloc[0]
rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"startup_s": t1 - t0, "load_s": t2 - t1, "analyze_s": t3 - t2, "total_s": t3 - t1, "cpu_s": c3 - c1, "peak_rss_kb": rss,
                  "idle_us": float(g.idle_ns) / 1e3, "compute_us": float(g.compute_ns) / 1e3, "non_compute_us": float(g.non_compute_ns) / 1e3}))
"""

HTA_CHILD = r"""
import json, logging, resource, sys, time
def cpu():
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
logging.disable(logging.WARNING)
t1 = time.perf_counter(); c1 = cpu()
t = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df = t.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter(); c3 = cpu()
r = df.iloc[0]
rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"startup_s": t1 - t0, "load_s": t2 - t1, "analyze_s": t3 - t2, "total_s": t3 - t1, "cpu_s": c3 - c1, "peak_rss_kb": rss,
                  "idle_us": float(r["idle_time(us)"]), "compute_us": float(r["compute_time(us)"]), "non_compute_us": float(r["non_compute_time(us)"])}))
"""


def _child(python: str, code: str, *args: str) -> dict:
    res = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"benchmark child failed ({python}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", "/tmp/hta-venv/bin/python"))
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = ap.parse_args(argv)
    if not args.trace.is_file():
        raise SystemExit(f"no such trace: {args.trace}")
    if not Path(args.hta_python).exists():
        raise SystemExit(f"HTA's python not found at {args.hta_python}: python -m venv /tmp/hta-venv && "
                         "/tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0")
    ps_rows, hta_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        hta_dir = Path(tmp) / "hta"
        hta_dir.mkdir()
        (hta_dir / args.trace.name).symlink_to(args.trace.resolve())
        reuse_rows = []
        for i in range(args.repeat):
            # Interleave the tools so that machine noise hits them alike.
            run = str(Path(tmp) / f"run{i}")
            ps_rows.append(_child(sys.executable, PERFSCOPE_CHILD, str(args.trace), run, "import"))
            hta_rows.append(_child(args.hta_python, HTA_CHILD, str(hta_dir)))
            reuse_rows.append(_child(sys.executable, PERFSCOPE_CHILD, str(args.trace), run, "reuse"))
    ps_t, hta_t = _median(ps_rows, "total_s"), _median(hta_rows, "total_s")
    doc = {
        "trace": str(args.trace), "trace_bytes": args.trace.stat().st_size, "repeat": args.repeat, "cpus": os.cpu_count(),
        "perfscope": {k: _median(ps_rows, k) for k in ps_rows[0]},
        "hta": {k: _median(hta_rows, k) for k in hta_rows[0]},
        "perfscope_analyze_imported": {k: _median(reuse_rows, k) for k in reuse_rows[0]},
        "speedup": hta_t / ps_t if ps_t > 0 else float("inf"),
        "speedup_cpu": _median(hta_rows, "cpu_s") / _median(ps_rows, "cpu_s"),
        "speedup_analyze_imported": hta_t / _median(reuse_rows, "analyze_s"),
        "rss_ratio": _median(hta_rows, "peak_rss_kb") / _median(ps_rows, "peak_rss_kb"),
    }
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    p, h = doc["perfscope"], doc["hta"]
    print(f"trace: {args.trace.name} ({doc['trace_bytes'] / 1e6:.2f} MB gz), median of {args.repeat} runs, {doc['cpus']} CPUs")
    print(f"{'':24}{'perfscope':>12}{'HTA 0.5.0':>12}")
    print(f"{'load / import (s)':24}{p['load_s']:12.3f}{h['load_s']:12.3f}")
    print(f"{'analyze (s)':24}{p['analyze_s']:12.3f}{h['analyze_s']:12.3f}")
    print(f"{'total (s)':24}{p['total_s']:12.3f}{h['total_s']:12.3f}")
    print(f"{'total CPU (s)':24}{p['cpu_s']:12.3f}{h['cpu_s']:12.3f}")
    print(f"{'module imports (s)':24}{p['startup_s']:12.3f}{h['startup_s']:12.3f}")
    print(f"{'peak RSS (MiB)':24}{p['peak_rss_kb'] / 1024:12.1f}{h['peak_rss_kb'] / 1024:12.1f}")
    print(f"{'idle / compute / non (us)':24}  {p['idle_us']:.0f}/{p['compute_us']:.0f}/{p['non_compute_us']:.0f}  vs  "
          f"{h['idle_us']:.0f}/{h['compute_us']:.0f}/{h['non_compute_us']:.0f}")
    r = doc["perfscope_analyze_imported"]
    print(f"speed-up, import + analyze (HTA total / perfscope total): {doc['speedup']:.1f}x wall, "
          f"{doc['speedup_cpu']:.1f}x CPU   RSS ratio: {doc['rss_ratio']:.1f}x")
    print(f"speed-up, analyze an imported run ({r['analyze_s']:.3f} s, peak RSS {r['peak_rss_kb'] / 1024:.0f} MiB): "
          f"{doc['speedup_analyze_imported']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
