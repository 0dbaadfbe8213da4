"""Kineto import speed and memory: perfscope vs Holistic Trace Analysis, side by side.

For each trace, each tool runs in a fresh Python process, three times, interleaved
(HTA, perfscope, HTA, perfscope, ...).  Each child reports the time of the load call
itself; the parent measures the child's whole wall time (interpreter start and imports
included) and its peak RSS (``os.wait4`` resource usage, ``ru_maxrss``).  Medians are
reported with the HTA / perfscope ratio.  Linux carries the parent's resident size at
spawn into a child's ``ru_maxrss``, so everything that reads a trace in bulk (the synthetic
trace, counting events) runs in a helper process and this one stays small.

* HTA: ``TraceAnalysis(trace_dir=DIR)`` with the trace alone in DIR (HolisticTraceAnalysis
  0.5.0 installed in its own virtual environment; pass its python with ``--hta-python``).
* perfscope: ``perfscope import kineto TRACE -o RUN`` (the CLI, as a user runs it) for the
  process figures, and ``import_kineto(...)`` timed inside the same process for the call.

Usage::

    python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0
    python benchmarks/import_speed.py --hta-python /tmp/hta-venv/bin/python \\
        [--trace FILE ...] [--synthetic-events 216000] [--repeat 3] [--json OUT]

Without ``--trace`` it uses ``ns_resolution_trace_rank-0`` and
``nccl_parser_config_nccl_data`` from ``../shared/data/kineto`` when present, plus a
synthetic trace of ``--synthetic-events`` events (0 to skip) made by tiling the largest
shared trace (or the repo's DDP fixture) in time.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "kineto"
FIXTURE = REPO / "tests" / "data" / "kineto" / "ddp_rank0.json.gz"

HTA_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1, c1 = time.perf_counter(), time.process_time()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2, c2 = time.perf_counter(), time.process_time()
n = sum(len(df) for df in analysis.t.get_all_traces().values())
print(json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "call_cpu_s": c2 - c1, "rows": n}))
"""

PERFSCOPE_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from perfscope.store.kineto import import_kineto
t1, c1 = time.perf_counter(), time.process_time()
result = import_kineto([sys.argv[1]], sys.argv[2])
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "call_cpu_s": c2 - c1, "rows": result.total("kernels")}))
"""


def run_measured(argv: list[str], env: dict[str, str] | None = None, *, parse: bool = True) -> dict[str, Any]:
    """Run ``argv`` as a child; return its wall time, CPU time and peak RSS (MB; both from
    ``os.wait4``, so this child's and its reaped children's alone) and, with ``parse``, the
    last JSON line it printed, if any."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        proc = subprocess.Popen(argv, stdout=fout, stderr=ferr, env=env, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read().decode(), ferr.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed ({proc.returncode}): {err[-2000:]}")
    doc: dict[str, Any] = {}
    for line in out.splitlines()[::-1] if parse else ():
        if line.startswith("{"):
            doc = json.loads(line)
            break
    # The measured figures win over a child's own keys of the same name.
    return {**doc, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def count_events(path: Path) -> int:
    """Number of trace events in a Kineto file."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as f:  # type: ignore[operator]
        return len(json.load(f)["traceEvents"])


def trace_info(path: Path) -> dict[str, Any]:
    """Events and JSON size (MB) of a trace."""
    data = path.read_bytes()
    text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    return {"events": count_events(path), "json_mb": len(text) / 1e6}


def in_helper(*argv: str) -> Any:
    """Run this script's ``--helper`` mode in a child process and return its JSON answer
    (keeps this process's resident size, which its children inherit in ru_maxrss, small)."""
    out = subprocess.run([sys.executable, __file__, "--helper", *argv], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_synthetic(target_events: int, out: Path, source: Path | None = None) -> Path:
    """Tile a real trace (``source``, default the largest shared one) in time until it
    holds ``target_events`` events; return the file.

    Each copy is shifted by the source's span (plus a gap) and its correlation / External
    ids are offset, so it reads like a longer capture of the same job.
    """
    src = source or SHARED / "ns_resolution_trace_rank-0.json.gz"
    if not src.is_file():
        src = FIXTURE
    with gzip.open(src, "rb") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + e.get("dur", 0) for e in timed)
    span = (hi - lo) + 1000.0
    tiled: list[dict[str, Any]] = [e for e in events if e.get("ph") == "M"]
    copy = 0
    while len(tiled) < target_events:
        shift = copy * span
        for e in timed:
            if len(tiled) >= target_events:
                break
            e2 = dict(e)
            e2["ts"] = round(e["ts"] + shift, 3)
            if copy:
                args = e.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += copy * 10_000_000
                    e2["args"] = args
                if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                    e2["id"] = e["id"] + copy * 10_000_000
                if isinstance(e.get("name"), str) and e["name"].startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e['name'][13:]) + copy * 1000}"
            tiled.append(e2)
        copy += 1
    doc["traceEvents"] = tiled
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt", compresslevel=6) as f:
        json.dump(doc, f)
    return out


def bench(trace: Path, hta_python: str, repeat: int, work: Path) -> dict[str, Any]:
    """Measure one trace with both tools; return medians and ratios."""
    hta_dir = work / f"hta-{trace.name}"
    hta_dir.mkdir(parents=True, exist_ok=True)
    link = hta_dir / trace.name
    if not link.exists():
        os.symlink(trace.resolve(), link)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    results: dict[str, list[dict[str, Any]]] = {"hta": [], "perfscope_cli": [], "perfscope_call": []}
    for i in range(repeat):
        results["hta"].append(run_measured([hta_python, "-c", HTA_CHILD, str(hta_dir)]))
        run = work / f"run-{trace.name}-{i}"
        shutil.rmtree(run, ignore_errors=True)
        results["perfscope_cli"].append(run_measured(
            [sys.executable, "-m", "perfscope", "import", "kineto", str(trace), "-o", str(run)], env))
        shutil.rmtree(run, ignore_errors=True)
        results["perfscope_call"].append(run_measured([sys.executable, "-c", PERFSCOPE_CHILD, str(trace), str(run)], env))
        shutil.rmtree(run, ignore_errors=True)

    def med(tool: str, key: str) -> float:
        return statistics.median(r[key] for r in results[tool])

    summary = {
        "trace": trace.name,
        **in_helper("info", str(trace)),
        "hta_call_s": med("hta", "call_s"),
        "hta_call_cpu_s": med("hta", "call_cpu_s"),
        "hta_process_cpu_s": med("hta", "cpu_s"),
        "hta_import_s": med("hta", "import_s"),
        "hta_process_s": med("hta", "wall_s"),
        "hta_rss_mb": med("hta", "rss_mb"),
        "perfscope_call_s": med("perfscope_call", "call_s"),
        "perfscope_call_cpu_s": med("perfscope_call", "call_cpu_s"),
        "perfscope_process_cpu_s": med("perfscope_cli", "cpu_s"),
        "perfscope_import_s": med("perfscope_call", "import_s"),
        "perfscope_process_s": med("perfscope_cli", "wall_s"),
        "perfscope_rss_mb": med("perfscope_cli", "rss_mb"),
        "runs": results,
    }
    summary["ratio_call"] = summary["hta_call_s"] / summary["perfscope_call_s"]
    summary["ratio_call_cpu"] = summary["hta_call_cpu_s"] / summary["perfscope_call_cpu_s"]
    summary["ratio_process_cpu"] = summary["hta_process_cpu_s"] / summary["perfscope_process_cpu_s"]
    summary["ratio_process"] = summary["hta_process_s"] / summary["perfscope_process_s"]
    summary["ratio_rss"] = summary["hta_rss_mb"] / summary["perfscope_rss_mb"]
    return summary


def main(argv: list[str] | None = None) -> int:
    """Parse options, run the benchmark, print a table (and write JSON if asked)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--helper"]:  # see in_helper
        if argv[1] == "info":
            print(json.dumps(trace_info(Path(argv[2]))))
        else:
            print(json.dumps(str(make_synthetic(int(argv[2]), Path(argv[3])))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python",
                    help="python of a venv with HolisticTraceAnalysis==0.5.0")
    ap.add_argument("--trace", action="append", type=Path, default=[], help="trace file (repeatable)")
    ap.add_argument("--synthetic-events", type=int, default=216_000,
                    help="also measure a synthetic trace of this many events (0 to skip)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write all measurements here")
    ap.add_argument("--workdir", type=Path, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    if not Path(args.hta_python).exists():
        ap.error(f"{args.hta_python} not found; create the HTA venv first (see --help)")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="perfscope-bench-"))
    traces = list(args.trace)
    if not traces:
        traces = [p for p in (SHARED / "ns_resolution_trace_rank-0.json.gz", SHARED / "nccl_parser_config_nccl_data.json.gz") if p.is_file()]
    if args.synthetic_events:
        out = work / f"synthetic_{args.synthetic_events}.json.gz"
        traces.append(Path(in_helper("synthetic", str(args.synthetic_events), str(out))))
    rows = []
    for trace in traces:
        s = bench(trace, args.hta_python, args.repeat, work)
        rows.append(s)
        print(
            f"{s['trace']}: {s['events']:,} events, {s['json_mb']:.1f} MB JSON | "
            f"load call wall (CPU): HTA {s['hta_call_s']:.2f} s ({s['hta_call_cpu_s']:.2f}), "
            f"perfscope {s['perfscope_call_s']:.3f} s ({s['perfscope_call_cpu_s']:.3f}) -> {s['ratio_call']:.1f}x ({s['ratio_call_cpu']:.1f}x) | "
            f"whole process wall (CPU): HTA {s['hta_process_s']:.2f} s ({s['hta_process_cpu_s']:.2f}), "
            f"perfscope {s['perfscope_process_s']:.2f} s ({s['perfscope_process_cpu_s']:.2f}) -> "
            f"{s['ratio_process']:.1f}x ({s['ratio_process_cpu']:.1f}x) | "
            f"peak RSS: HTA {s['hta_rss_mb']:.0f} MB, perfscope {s['perfscope_rss_mb']:.0f} MB ({s['ratio_rss']:.2f}x)",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
