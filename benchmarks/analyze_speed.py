"""Analysis speed: perfscope ``import + analyze`` against HTA ``load + get_temporal_breakdown``.

Both sides run on the same Kineto trace, side by side in one invocation, each in a fresh
subprocess (so neither benefits from the other's page cache of Python objects), ``--repeat``
times; the median wall time, CPU time (process plus children, which is steadier on a shared
machine) and the peak RSS (the process and its children, e.g. HTA's parser pool) are
reported, with the ratios.

* perfscope, two ways (``--perfscope-path``, both by default), each timed inside the child
  after ``import perfscope`` (interpreter start-up and module imports are reported
  separately as ``startup``):

  - two calls: ``import_kineto(trace, run)`` then ``analyze_run(open_run(run))`` (the full
    analysis: steps, breakdown, GPU summary, kernels, collectives, rules); and, in another
    child, ``analyze_run`` alone on the run imported before (the store is written once and
    analysed many times);
  - one call: ``import_and_analyze(trace, run)`` (what ``perfscope analyze TRACE`` runs):
    the same analysis, of the tables in memory while the run is written on a background
    thread; it returns once the run is on disk.  Its ``load`` is the time until the
    analysis starts, its ``analyze`` the rest (the analysis, then waiting for the write,
    reported alone as ``write_wait``).
* HTA: ``TraceAnalysis(trace_dir=...)`` then ``get_temporal_breakdown(visualize=False)``,
  timed inside the child after ``import hta``; HTA runs from its own virtual environment
  (default ``/tmp/hta-venv``, created with ``pip install HolisticTraceAnalysis==0.5.0``).

With ``--cli``, instead: the whole command as users run it, each a fresh process timed
from the outside (wall time around the child, its CPU time and peak RSS from ``os.wait4``):
interpreter start-up, imports, work and output included.  Per trace, interleaved (the order
rotates each round), ``--repeat`` rounds, medians:

* ``perfscope analyze TRACE --run-out NEW --format json > file``: the first analysis of a
  trace (it imports the trace into a new run, analyses it and prints the JSON document);
* the same command again on the same ``--run-out`` (the run imported before is reused);
* HTA: a script that imports HTA and runs ``TraceAnalysis(trace_dir=...)`` and
  ``get_temporal_breakdown(visualize=False)`` (its load + breakdown calls are also timed
  inside the process);
* ``python -c pass`` with perfscope's interpreter: the start-up floor of this environment;
* ``python -c 'import numpy'``, then with pyarrow (its Parquet and compute modules), then
  with pandas: what importing the libraries alone costs, the least any analysis built on
  them can take (printed beside HTA's time / 10, the issue-17 budget);
* ``perfscope --help`` (the console script).

Traces: ``--trace`` (default ns_resolution_trace_rank-0) and a synthetic trace of
``--synthetic-events`` events (``import_speed.make_synthetic``: the same trace's steps
repeated in time).  Children run with bytecode caches in ``WORK/pycache``
(``PYTHONPYCACHEPREFIX``, ``PYTHONDONTWRITEBYTECODE`` unset) after one warm-up run of each
command, as an installed package runs (pip compiles its modules at install; this
environment sets ``PYTHONDONTWRITEBYTECODE``, which would otherwise make every run compile
perfscope's sources).

With ``--scale``, instead: ``analyze_run`` alone on a large synthetic run written through the
store (2 ranks x (1M kernels, a fifth of them NCCL, + 1M API calls + 20k copies), 1000
steps, no collectives table, so collectives are rebuilt from the 400k NCCL kernels), each
repeat in a fresh process: median wall and CPU time and peak RSS (``ru_maxrss``; the
process holds about 110 MiB of interpreter and libraries before it reads anything).

Usage::

    python benchmarks/analyze_speed.py [--trace FILE] [--repeat 5] [--hta-python /tmp/hta-venv/bin/python] [--json]
                                       [--perfscope-path both|one-call|two-calls]
    python benchmarks/analyze_speed.py --scale [--repeat 5] [--run DIR]
    python benchmarks/analyze_speed.py --cli [--repeat 7] [--synthetic-events 216000] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
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
from perfscope.pipeline import import_and_analyze
t1 = time.perf_counter(); c1 = cpu()
extra = {}
if sys.argv[3] == "one-call":
    marks = {}
    def progress(message):
        # The analysis says "reading collectives" first, and "writing the run" once done.
        if not message.startswith("importing"):
            marks.setdefault("analysis", time.perf_counter())
        if message == "writing the run":
            marks["write"] = time.perf_counter()
    a = import_and_analyze(sys.argv[1], sys.argv[2], progress=progress)[1]
    t3 = time.perf_counter(); c3 = cpu()
    t2 = marks["analysis"]
    extra["write_wait_s"] = t3 - marks["write"]
else:
    if sys.argv[3] == "import":
        import_kineto(sys.argv[1], sys.argv[2])
    t2 = time.perf_counter()
    a = analyze_run(open_run(sys.argv[2]))
    t3 = time.perf_counter(); c3 = cpu()
g = a.gpu_summary.iloc[0]
rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"startup_s": t1 - t0, "load_s": t2 - t1, "analyze_s": t3 - t2, "total_s": t3 - t1, "cpu_s": c3 - c1, "peak_rss_kb": rss,
                  "idle_us": float(g.idle_ns) / 1e3, "compute_us": float(g.compute_ns) / 1e3, "non_compute_us": float(g.non_compute_ns) / 1e3,
                  **extra}))
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


SCALE_CHILD = r"""
import json, resource, sys, time
from perfscope.store import open_run
from perfscope.analyzers import analyze_run
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t, c = time.perf_counter(), time.process_time()
a = analyze_run(open_run(sys.argv[1]))
print(json.dumps({"analyze_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "steps": len(a.steps),
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "before_rss_kb": before}))
"""


def make_scale_run(path: Path, ranks: int = 2, kernels: int = 1_000_000, steps: int = 1000, copies: int = 20_000,
                   seed: int = 0) -> None:
    """Write the ``--scale`` run: per rank ``kernels`` kernels (20 % NCCL, 2000 compute names),
    one launching API call each (2 % of them stream syncs), ``copies`` copies, ``steps``
    ProfilerSteps, data-loader spans and markers; no collectives table."""
    import numpy as np

    from perfscope.store import create_run, update_run, write_rank_meta, write_rank_tables

    rng = np.random.default_rng(seed)
    create_run(path, command=["python", "train.py"], source="record", world_size=ranks, collectors=["synthetic"])
    t0 = 1_750_000_000_000_000_000
    names = np.array([f"void kernel_{i}<float, {i % 7}>(Params)" for i in range(2000)]
                     + ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                        "Memset (Device)", "Memcpy DtoD (Device -> Device)"], dtype=object)
    for rank in range(ranks):
        api_start = t0 + np.cumsum(rng.integers(4_000, 16_000, kernels))  # a launch every ~10 us
        api_dur = rng.integers(2_000, 8_000, kernels)
        kdur = rng.integers(1_000, 12_000, kernels)
        kstart = api_start + api_dur + rng.integers(500, 30_000, kernels)
        nccl = rng.random(kernels) < 0.2
        code = np.where(nccl, 2000 + rng.integers(0, 2, kernels), rng.integers(0, 2000, kernels))
        code[rng.random(kernels) < 0.01] = 2002 + rng.integers(0, 2)
        corr = np.arange(kernels, dtype=np.int64) + 1
        api_names = np.where(rng.random(kernels) < 0.02, "cudaStreamSynchronize", "cudaLaunchKernel").astype(object)
        edges = np.linspace(t0, int(kstart[-1] + kdur[-1]), steps + 1).astype(np.int64)
        ci = np.sort(rng.choice(kernels, copies, replace=False))
        syncs = api_start[::500]
        write_rank_tables(path, rank, {
            "kernels": {"start_ns": kstart, "dur_ns": kdur, "device": np.full(kernels, rank, np.int32),
                        "stream": np.where(nccl, 20, 7), "correlation": corr, "name": list(names[code])},
            "api": {"start_ns": api_start, "dur_ns": api_dur, "pid": np.full(kernels, 100 + rank),
                    "tid": np.ones(kernels, np.int64), "correlation": corr, "name": list(api_names), "kind": ["runtime"] * kernels},
            "memcpy": {"start_ns": kstart[ci] + 100, "dur_ns": rng.integers(1_000, 50_000, copies),
                       "device": np.full(copies, rank, np.int32), "stream": np.full(copies, 7), "correlation": corr[-1] + 1 + np.arange(copies),
                       "copy_kind": list(np.array(["H2D", "D2H", "D2D"], dtype=object)[rng.integers(0, 3, copies)]),
                       "bytes": rng.integers(4, 64 << 20, copies), "pageable": rng.random(copies) < 0.3},
            "sync": {"start_ns": syncs, "dur_ns": np.full(syncs.size, 20_000), "sync_kind": ["stream"] * syncs.size},
            "steps": {"step": np.arange(steps), "start_ns": edges[:-1], "dur_ns": np.diff(edges) - 1000,
                      "name": [f"ProfilerStep#{i}" for i in range(steps)], "source": ["profiler_step"] * steps},
            "host": {"start_ns": edges[:-1], "dur_ns": np.full(steps, 50_000), "tid": np.ones(steps, np.int64),
                     "kind": ["dataloader_wait"] * steps, "name": ["DataLoader.__next__"] * steps},
            "markers": {"start_ns": edges[:-1], "dur_ns": np.full(steps, 100_000), "pid": np.full(steps, 1),
                        "tid": np.ones(steps, np.int64), "source": ["user_annotation"] * steps,
                        "name": ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] * steps},
        })
        write_rank_meta(path, rank, {"status": "complete", "host": "h0"})
    update_run(path, status="complete")


def scale(args: argparse.Namespace) -> int:
    """The ``--scale`` benchmark: analyze_run alone on a large synthetic run, fresh processes."""
    with tempfile.TemporaryDirectory(prefix="perfscope-scale-") as tmp:
        run = Path(args.run) if args.run else Path(tmp) / "scale.perfscope"
        if not (run / "run.json").exists():
            # In a child: the peak RSS of a process counts its parent's RSS at fork time
            # (Linux keeps ru_maxrss across exec), so this process must stay small.
            subprocess.run([sys.executable, __file__, "--make-scale", str(run)], check=True)
        rows = [_child(sys.executable, SCALE_CHILD, str(run)) for _ in range(args.repeat)]
    doc = {k: _median(rows, k) for k in rows[0]}
    doc.update(repeat=args.repeat, cpus=os.cpu_count(), load_average=os.getloadavg()[0],
               analyze_s_all=[round(r["analyze_s"], 3) for r in rows])
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"analyze_run, 2 ranks x (1M kernels + 1M API calls + 20k copies), 1000 steps, median of {args.repeat} "
          f"fresh processes, {doc['cpus']} CPUs, load average {doc['load_average']:.1f}")
    print(f"wall {doc['analyze_s']:.2f} s (runs: {', '.join(f'{x:.2f}' for x in doc['analyze_s_all'])}), "
          f"CPU {doc['cpu_s']:.2f} s, peak RSS {doc['peak_rss_kb'] / 1024:.0f} MiB "
          f"({doc['before_rss_kb'] / 1024:.0f} MiB before reading), {int(doc['steps'])} step rows")
    return 0


def cli(args: argparse.Namespace) -> int:
    """The ``--cli`` benchmark (module docstring): whole commands, fresh processes."""
    sys.path.insert(0, str(Path(__file__).parent))
    from import_speed import in_helper, run_measured

    work = Path(tempfile.mkdtemp(prefix="perfscope-cli-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    traces = [args.trace]
    if args.synthetic_events:
        traces.append(Path(in_helper("synthetic", str(args.synthetic_events), str(work / f"synthetic_{args.synthetic_events}.json.gz"))))
    doc: dict = {"repeat": args.repeat, "cpus": os.cpu_count(), "traces": []}
    for trace in traces:
        arms = _cli_arms(trace, work, args.hta_python)
        for name, argv in arms.items():  # warm-up: bytecode caches, the reused run, the page cache
            run_measured(argv("warm"), env, parse=name == "hta")
        rows: dict[str, list[dict]] = {name: [] for name in arms}
        loads = []
        for i in range(args.repeat):
            order = list(arms)[i % len(arms):] + list(arms)[:i % len(arms)]
            for name in order:
                rows[name].append(run_measured(arms[name](i), env, parse=name == "hta"))
            loads.append(os.getloadavg()[0])
        med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0] if isinstance(rs[0][k], float)} for name, rs in rows.items()}
        hta = med["hta"]
        entry = {"trace": trace.name, **in_helper("info", str(trace)), "medians": med, "load_average": [min(loads), max(loads)],
                 "first_wall_all": sorted(round(r["wall_s"], 3) for r in rows["first"]),
                 "hta_wall_all": sorted(round(r["wall_s"], 3) for r in rows["hta"])}
        for arm in ("first", "reuse"):
            p = med[arm]
            entry[f"{arm}_speedup_wall"] = hta["wall_s"] / p["wall_s"]
            entry[f"{arm}_speedup_cpu"] = hta["cpu_s"] / p["cpu_s"]
            entry[f"{arm}_speedup_vs_hta_calls"] = hta["total_s"] / p["wall_s"]
        doc["traces"].append(entry)
        if not args.json:
            _print_cli(entry, args.repeat)
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(doc, indent=1))
    return 0


#: Imports alone, each a whole fresh process: the least any analysis built on these libraries
#: costs (name -> (code, label)).  Against HTA / 10 they show which targets a stack can reach.
IMPORT_FLOORS = {
    "import_numpy": ("import numpy", "python -c 'import numpy'"),
    "import_arrow": ("import numpy, pyarrow, pyarrow.parquet, pyarrow.compute", "  + pyarrow, .parquet, .compute"),
    "import_pandas": ("import numpy, pyarrow, pyarrow.parquet, pyarrow.compute, pandas", "  + pandas"),
}


def _cli_arms(trace: Path, work: Path, hta_python: str) -> dict[str, Callable[[object], list[str]]]:
    """The ``--cli`` commands of one trace: name -> the argv of round ``i``."""
    hta_dir = work / f"hta-{trace.name}"
    hta_dir.mkdir()
    (hta_dir / trace.name).symlink_to(trace.resolve())
    reused = work / f"reused-{trace.name}.perfscope"

    def perfscope_cmd(run: Path, out: Path) -> list[str]:
        return [sys.executable, "-m", "perfscope", "analyze", str(trace), "--run-out", str(run), "--format", "json", "-o", str(out)]

    return {
        "first": lambda i: perfscope_cmd(work / f"run-{trace.name}-{i}", work / f"first-{trace.name}-{i}.json"),
        "reuse": lambda i: perfscope_cmd(reused, work / f"reuse-{trace.name}-{i}.json"),
        "hta": lambda i: [hta_python, "-c", HTA_CHILD, str(hta_dir)],
        "python": lambda i: [sys.executable, "-c", "pass"],
        "help": lambda i: [str(Path(sys.executable).parent / "perfscope"), "--help"],
        **{name: (lambda i, code=code: [sys.executable, "-c", code]) for name, (code, _) in IMPORT_FLOORS.items()},
    }


def _print_cli(e: dict, repeat: int) -> None:
    m = e["medians"]
    print(f"{e['trace']}: {e['events']:,} events, {e['json_mb']:.1f} MB JSON; medians of {repeat}, "
          f"load average {e['load_average'][0]:.1f}-{e['load_average'][1]:.1f}")
    print(f"{'':44}{'wall (s)':>10}{'CPU (s)':>10}{'peak RSS (MiB)':>16}")
    for name, label in (("first", "perfscope analyze TRACE --format json"), ("reuse", "  the same again (run reused)"),
                        ("hta", "HTA: import + load + temporal breakdown"), ("python", "python -c pass"),
                        ("help", "perfscope --help (console script)"),
                        *((name, label) for name, (_, label) in IMPORT_FLOORS.items())):
        print(f"{label:44}{m[name]['wall_s']:10.3f}{m[name]['cpu_s']:10.3f}{m[name]['rss_mb']:16.0f}")
    print(f"{'  HTA: load + breakdown calls alone':44}{m['hta']['total_s']:10.3f}")
    print(f"{'HTA whole / 10 (the 10x budget)':44}{m['hta']['wall_s'] / 10:10.3f}{m['hta']['cpu_s'] / 10:10.3f}")
    for arm in ("first", "reuse"):
        print(f"HTA whole / perfscope {arm}: {e[f'{arm}_speedup_wall']:.1f}x wall, {e[f'{arm}_speedup_cpu']:.1f}x CPU; "
              f"HTA's calls alone / perfscope {arm} whole: {e[f'{arm}_speedup_vs_hta_calls']:.1f}x")


def _child(python: str, code: str, *args: str) -> dict:
    # -P: the working directory is not put first on sys.path, so a checkout given through
    # PYTHONPATH (an older commit, for a before/after comparison) is the one imported even
    # when this runs from the repository root.
    safe_path = ["-P"] if python == sys.executable and sys.version_info >= (3, 11) else []
    res = subprocess.run([python, *safe_path, "-c", code, *args], capture_output=True, text=True, check=False)
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
    ap.add_argument("--perfscope-path", choices=["both", "one-call", "two-calls"], default="both",
                    help="perfscope's side: import_and_analyze (one call), import_kineto then analyze_run (two calls), "
                         "or both (default)")
    ap.add_argument("--scale", action="store_true", help="analyze_run alone on a large synthetic run (no HTA)")
    ap.add_argument("--run", help="--scale: use (or create) this run directory instead of a temporary one")
    ap.add_argument("--cli", action="store_true", help="whole commands as users run them, against HTA's whole script")
    ap.add_argument("--synthetic-events", type=int, default=216_000, help="--cli: also a synthetic trace of this many events (0: none)")
    ap.add_argument("--make-scale", help=argparse.SUPPRESS)  # internal: write the --scale run there
    args = ap.parse_args(argv)
    if args.make_scale:
        make_scale_run(Path(args.make_scale))
        return 0
    if args.scale:
        return scale(args)
    if args.cli:
        return cli(args)
    if not args.trace.is_file():
        raise SystemExit(f"no such trace: {args.trace}")
    if not Path(args.hta_python).exists():
        raise SystemExit(f"HTA's python not found at {args.hta_python}: python -m venv /tmp/hta-venv && "
                         "/tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0")
    two, one = args.perfscope_path in ("both", "two-calls"), args.perfscope_path in ("both", "one-call")
    ps_rows, one_rows, reuse_rows, hta_rows = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        hta_dir = Path(tmp) / "hta"
        hta_dir.mkdir()
        (hta_dir / args.trace.name).symlink_to(args.trace.resolve())
        for i in range(args.repeat):
            # Interleave the tools so that machine noise hits them alike.
            run = str(Path(tmp) / f"run{i}")
            if two:
                ps_rows.append(_child(sys.executable, PERFSCOPE_CHILD, str(args.trace), run, "import"))
            if one:
                one_rows.append(_child(sys.executable, PERFSCOPE_CHILD, str(args.trace), run + "-one", "one-call"))
            hta_rows.append(_child(args.hta_python, HTA_CHILD, str(hta_dir)))
            if two:
                reuse_rows.append(_child(sys.executable, PERFSCOPE_CHILD, str(args.trace), run, "reuse"))
    hta = {k: _median(hta_rows, k) for k in hta_rows[0]}
    doc: dict = {"trace": str(args.trace), "trace_bytes": args.trace.stat().st_size, "repeat": args.repeat, "cpus": os.cpu_count(),
                 "hta": hta}
    # (name in the document, label in the table, rows) of each perfscope path measured.
    sides = [(key, label, rows) for key, label, rows in (("perfscope", "perfscope", ps_rows),
                                                        ("perfscope_one_call", "one call", one_rows)) if rows]
    for key, _, rows in sides:
        p = doc[key] = {k: _median(rows, k) for k in rows[0]}
        suffix = "" if key == "perfscope" else "_one_call"
        doc["speedup" + suffix] = hta["total_s"] / p["total_s"] if p["total_s"] > 0 else float("inf")
        doc["speedup_cpu" + suffix] = hta["cpu_s"] / p["cpu_s"]
        doc["rss_ratio" + suffix] = hta["peak_rss_kb"] / p["peak_rss_kb"]
    if reuse_rows:
        doc["perfscope_analyze_imported"] = {k: _median(reuse_rows, k) for k in reuse_rows[0]}
        doc["speedup_analyze_imported"] = hta["total_s"] / doc["perfscope_analyze_imported"]["analyze_s"]
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    cols = [(label, doc[key]) for key, label, _ in sides] + [("HTA 0.5.0", hta)]
    print(f"trace: {args.trace.name} ({doc['trace_bytes'] / 1e6:.2f} MB gz), median of {args.repeat} runs, {doc['cpus']} CPUs")

    def row(title: str, fmt: str, value: Callable[[dict], float]) -> None:
        print(f"{title:26}" + "".join(f"{format(value(c), fmt):>12}" for _, c in cols))

    print(f"{'':26}" + "".join(f"{label:>12}" for label, _ in cols))
    row("load / import (s)", ".3f", lambda c: c["load_s"])
    row("analyze (s)", ".3f", lambda c: c["analyze_s"])
    row("total (s)", ".3f", lambda c: c["total_s"])
    row("total CPU (s)", ".3f", lambda c: c["cpu_s"])
    row("module imports (s)", ".3f", lambda c: c["startup_s"])
    row("peak RSS (MiB)", ".1f", lambda c: c["peak_rss_kb"] / 1024)
    for label, c in cols:
        print(f"{'idle / compute / non (us)':26}{label:>12}  {c['idle_us']:.0f}/{c['compute_us']:.0f}/{c['non_compute_us']:.0f}")
    if "perfscope_one_call" in doc:
        print(f"one call: the analysis waited {doc['perfscope_one_call']['write_wait_s']:.3f} s for the background write "
              "(in its analyze time)")
    for key, label, _ in sides:
        suffix = "" if key == "perfscope" else "_one_call"
        print(f"speed-up, import + analyze, {label} (HTA total / perfscope total): {doc['speedup' + suffix]:.1f}x wall, "
              f"{doc['speedup_cpu' + suffix]:.1f}x CPU   RSS ratio: {doc['rss_ratio' + suffix]:.1f}x")
    if reuse_rows:
        r = doc["perfscope_analyze_imported"]
        print(f"speed-up, analyze an imported run ({r['analyze_s']:.3f} s, peak RSS {r['peak_rss_kb'] / 1024:.0f} MiB): "
              f"{doc['speedup_analyze_imported']:.1f}x")
    return 0

if __name__ == "__main__":
    sys.exit(main())
