"""Scale: analysing N-rank runs made from a real trace, in one process and on Dask.

The run: ``ns_resolution_trace_rank-0.json.gz`` (a real Kineto trace of 21.5k GPU, runtime
and marker events, 5 ProfilerSteps) is imported once; each of the N ranks gets its tables
repeated ``--tile`` times one after the other in time (steps renumbered, correlation ids
kept distinct), shifted by a per-rank clock jitter (``(rank % 7)`` us), and written through
the store writer (``write_rank_tables``).  Every step gets one AllReduce (a collectives row
and its NCCL kernel) over the last 30 % of the step, ending at the same instant on every
rank; one rank (``--straggler``, default N // 3) arrives ``--delay-ms`` late at every one of
them, so the others wait for it.  What is measured, each in a fresh process:

* ``write``: writing the N-rank run (wall time, peak RSS) and its bytes on disk;
* ``analyze``: ``analyze_run(open_run(run))`` in one process (wall and CPU time, peak RSS
  and the RSS before reading, whether the injected straggler is the top row of
  ``Analysis.stragglers``), with the load average before and after;
* ``summaries``: the pickled size of each rank's ``RankSummary`` (what a Dask worker sends
  back; what the analysis keeps per rank), for N up to ``--sizes-up-to``;
* ``dask`` (at the N of ``--dask-at``): the same analysis with the passes on a
  ``LocalCluster`` of ``--dask-workers`` single-threaded worker processes: cluster start,
  analysis wall time, CPU time of the client and of the workers, peak RSS of the client and
  of each worker, and the JSON document compared with the one-process analysis's;
* ``hta`` (at the N of ``--hta-at``): HTA side by side.  HTA reads a folder of Kineto traces,
  so the same ranks are also written as one ``.pt.trace.json.gz`` per rank
  (:func:`make_kineto_traces`: the trace tiled in time, each rank shifted by its jitter, one
  NCCL AllReduce kernel per step that the straggler starts late); then, whole processes,
  interleaved, ``--hta-repeat`` times: ``perfscope analyze FOLDER --format json`` (import
  and analysis) against HTA's ``TraceAnalysis(trace_dir=FOLDER)`` plus
  ``get_temporal_breakdown()``: wall and CPU time (``os.wait4``, children included), peak
  RSS of the largest process, the straggler perfscope names.

Usage::

    python benchmarks/scale.py [--ranks 8,64,256,1024] [--tile 4] [--tile-large 1] [--large-from 1024]
                               [--dask-at 64] [--dask-workers 2] [--hta-at 8] [--hta-repeat 3]
                               [--hta-python /tmp/hta-venv/bin/python] [--keep DIR] [--json]
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
RANK_TABLES = ("kernels", "memcpy", "memset", "api", "markers", "steps")
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def make_run(base: Path, out: Path, ranks: int, tile: int, straggler: int, delay_ns: int) -> None:
    """Write the N-rank run at ``out`` from the one-rank run ``base`` (see the module docstring)."""
    import numpy as np
    import pandas as pd

    from perfscope.store import create_run, open_run, update_run, write_rank_meta, write_rank_tables

    src = open_run(base)
    tables = {t: src.table(t).drop(columns="rank") for t in RANK_TABLES}
    t0 = min(int(tables[t]["start_ns"].min()) for t in ("kernels", "api"))
    t1 = max(int((tables[t]["start_ns"] + tables[t]["dur_ns"]).max()) for t in ("kernels", "api"))
    period = t1 - t0 + 1_000_000  # each repeat starts 1 ms after the previous one ends
    corr_span = int(max(tables[t]["correlation"].max() for t in ("kernels", "api", "memcpy", "memset"))) + 1
    n_steps = len(tables["steps"])
    tiled = {}
    for name, df in tables.items():
        parts = []
        for k in range(tile):
            p = df.copy()
            p["start_ns"] += k * period
            if "correlation" in p:
                p["correlation"] += k * corr_span
            if name == "steps":
                p["step"] = np.arange(n_steps) + k * n_steps
                p["name"] = [f"ProfilerStep#{s}" for s in p["step"]]
            parts.append(p)
        tiled[name] = pd.concat(parts, ignore_index=True)
    steps = tiled["steps"]
    # One AllReduce per step over its last 30 %: it ends at the same instant on every rank.
    c_start = (steps["start_ns"] + steps["dur_ns"] * 7 // 10).to_numpy()
    c_end = (steps["start_ns"] + steps["dur_ns"]).to_numpy()
    n_coll = c_start.size
    create_run(out, command=["benchmarks/scale.py"], source="benchmark", world_size=ranks, collectors=["kineto", "synthetic"])
    for r in range(ranks):
        jitter = (r % 7) * 1_000
        arrive = c_start + (delay_ns if r == straggler else jitter)
        corr = 10 * tile * corr_span + np.arange(n_coll)
        coll = {"start_ns": arrive, "dur_ns": c_end - arrive, "enqueue_ns": arrive - 5_000, "comm_id": ["0x1"] * n_coll,
                "seq": np.arange(n_coll), "func": ["AllReduce"] * n_coll, "count": np.full(n_coll, 1 << 24),
                "datatype": ["float32"] * n_coll, "bytes": np.full(n_coll, 4 << 24), "nranks": np.full(n_coll, ranks),
                "correlation": corr, "kernel_name": [NCCL_KERNEL] * n_coll}
        nccl = pd.DataFrame({"start_ns": arrive, "dur_ns": c_end - arrive, "device": 0, "stream": 99, "correlation": corr,
                             "name": NCCL_KERNEL})
        out_tables = {}
        for name, df in tiled.items():
            d = df.copy()
            d["start_ns"] += jitter
            if name == "kernels":
                d = pd.concat([d, nccl.astype({c: d[c].dtype for c in nccl.columns if c != "name"})], ignore_index=True)
            out_tables[name] = d
        out_tables["collectives"] = coll
        write_rank_tables(out, r, out_tables)
        write_rank_meta(out, r, {"status": "complete", "host": "node0"})
    update_run(out, status="complete")


def make_kineto_traces(trace: Path, out: Path, ranks: int, tile: int, straggler: int, delay_ns: int) -> None:
    """Write ``ranks`` Kineto traces (``out/rank{r}.pt.trace.json.gz``, the folder form HTA
    and ``perfscope analyze DIR`` read) made like :func:`make_run`'s ranks: ``trace`` tiled
    ``tile`` times (``import_speed.make_synthetic``), each rank's events shifted by its
    jitter, its rank in ``distributedInfo``, and one NCCL AllReduce kernel over the last
    30 % of every ProfilerStep, which ``straggler`` starts ``delay_ns`` late."""
    import copy
    import gzip

    sys.path.insert(0, str(Path(__file__).parent))
    from import_speed import count_events, make_synthetic

    tiled = make_synthetic(count_events(trace) * tile, out / "tiled.json.gz", source=trace)
    with gzip.open(tiled, "rb") as f:
        base = json.load(f)
    tiled.unlink()
    steps = [e for e in base["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    for r in range(ranks):
        doc = copy.copy(base)
        jitter_us = float(r % 7)
        events = [dict(e, ts=e["ts"] + jitter_us) if isinstance(e.get("ts"), (int, float)) else e for e in base["traceEvents"]]
        for i, st in enumerate(steps):
            start = st["ts"] + st["dur"] * 0.7 + (delay_ns / 1e3 if r == straggler else jitter_us)
            end = st["ts"] + st["dur"]
            events.append({"ph": "X", "cat": "kernel", "name": NCCL_KERNEL, "pid": 0, "tid": 99, "ts": round(start, 3),
                           "dur": round(end - start, 3), "args": {"device": 0, "stream": 99, "correlation": 900_000_000 + i}})
        doc["traceEvents"] = events
        doc["distributedInfo"] = {**base.get("distributedInfo", {}), "backend": "nccl", "rank": r, "world_size": ranks}
        with gzip.open(out / f"rank{r}.pt.trace.json.gz", "wt", compresslevel=1) as f:
            json.dump(doc, f)


def hta_side_by_side(folder: Path, hta_python: str, repeat: int, straggler: int) -> dict:
    """perfscope (``analyze FOLDER --format json``: import + analysis) and HTA (load +
    temporal breakdown) on the same Kineto traces: whole processes, interleaved, medians."""
    sys.path.insert(0, str(Path(__file__).parent))
    from analyze_speed import HTA_CHILD
    from import_speed import run_measured

    rows: dict[str, list[dict]] = {"perfscope": [], "hta": []}
    named = []
    for i in range(repeat):
        run, out = folder.parent / f"{folder.name}-run{i}.perfscope", folder.parent / f"{folder.name}-{i}.json"
        rows["perfscope"].append(run_measured([sys.executable, "-m", "perfscope", "analyze", str(folder), "--run-out", str(run),
                                               "--format", "json", "-o", str(out), "--force"], parse=False))
        st = json.loads(out.read_text())["stragglers"]
        named.append(st[0]["rank"] if st else None)
        rows["hta"].append(run_measured([hta_python, "-c", HTA_CHILD, str(folder)]))
        rows["hta"][-1]["load_average"] = os.getloadavg()[0]
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "cpu_s", "rss_mb")} for k, v in rows.items()}
    med["hta"]["calls_s"] = statistics.median(r["total_s"] for r in rows["hta"])
    return {"medians": med, "repeat": repeat, "perfscope_straggler": named, "injected": straggler,
            "load_average": [r["load_average"] for r in rows["hta"]], "trace_bytes": sum(f.stat().st_size for f in folder.glob("*.gz"))}


def _child(code: str, *args: str, timeout: int = 3600) -> dict:
    """Run ``code`` in a fresh interpreter with ``args``; its last stdout line is JSON."""
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"child failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


WRITE_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, "benchmarks")
from scale import make_run
from pathlib import Path
t = time.perf_counter()
make_run(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
print(json.dumps({"write_s": time.perf_counter() - t, "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

KINETO_CHILD = r"""
import sys
sys.path.insert(0, "benchmarks")
from scale import make_kineto_traces
from pathlib import Path
make_kineto_traces(Path(sys.argv[1]), Path(sys.argv[2]), *map(int, sys.argv[3:7]))
print("{}")
"""

ANALYZE_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from perfscope.store import open_run
from perfscope.analyzers import analyze_run
t1, c1 = time.perf_counter(), time.process_time()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
a = analyze_run(open_run(sys.argv[1]))
t2, c2 = time.perf_counter(), time.process_time()
st = a.stragglers
events = int(sum(n for t, n in open_run(sys.argv[1]).row_counts().items() if t in ("kernels", "memcpy", "memset", "api", "markers")))
print(json.dumps({"import_s": t1 - t0, "analyze_s": t2 - t1, "analyze_cpu_s": c2 - c1, "before_rss_kb": before,
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "top_straggler": int(st["rank"].iloc[0]) if len(st) else None, "steps_rows": len(a.steps), "events": events}))
"""

SIZES_CHILD = r"""
import json, sys
from perfscope.store import open_run
from perfscope.analyzers import analyze_run
from perfscope.analyzers.rank_pass import rank_summary
run = open_run(sys.argv[1])
sizes = []
def measuring(ranks, inputs, say):
    for r in ranks:
        s = rank_summary(run, r, inputs[r])
        sizes.append(s.nbytes())
        yield s
analyze_run(run, rank_map=measuring)
sizes.sort()
print(json.dumps({"summary_bytes_median": sizes[len(sizes) // 2], "summary_bytes_max": sizes[-1], "summary_bytes_total": sum(sizes)}))
"""

DASK_CHILD = r"""
import json, resource, sys, time
from distributed import Client, LocalCluster
from perfscope.analyzers import analyze_run
from perfscope.distributed import analyze_on_dask
from perfscope.reports.jsondoc import render_analysis_json
from perfscope.store import open_run
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if __name__ == "__main__":
    t0 = time.perf_counter()
    with LocalCluster(n_workers=int(sys.argv[2]), threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, Client(cluster) as client:
        t1, c1 = time.perf_counter(), time.process_time()
        w0 = client.run(time.process_time)
        a = analyze_on_dask(sys.argv[1], client=client)
        t2, c2 = time.perf_counter(), time.process_time()
        w1 = client.run(time.process_time)
        workers = sorted(client.run(rss).values())
    client_rss = rss()
    same = render_analysis_json(a) == render_analysis_json(analyze_run(open_run(sys.argv[1])))
    st = a.stragglers
    print(json.dumps({"cluster_start_s": t1 - t0, "analyze_s": t2 - t1, "client_cpu_s": c2 - c1,
                      "workers_cpu_s": sum(w1[k] - w0[k] for k in w1), "client_peak_rss_kb": client_rss, "worker_peak_rss_kb": workers,
                      "top_straggler": int(st["rank"].iloc[0]) if len(st) else None, "same_json_as_one_process": same}))
"""


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--ranks", default="8,64,256,1024")
    ap.add_argument("--tile", type=int, default=4, help="repeats of the trace per rank")
    ap.add_argument("--tile-large", type=int, default=1, help="repeats per rank from --large-from ranks on")
    ap.add_argument("--large-from", type=int, default=1024)
    ap.add_argument("--delay-ms", type=float, default=5.0, help="how late the straggler arrives at each collective")
    ap.add_argument("--dask-at", type=int, default=64, help="N of the Dask run (0: none)")
    ap.add_argument("--dask-workers", type=int, default=2)
    ap.add_argument("--sizes-up-to", type=int, default=64, help="measure summary sizes for N up to this")
    ap.add_argument("--hta-at", default="8", help="N (comma-separated) of the Kineto-folder runs measured against HTA ('': none)")
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", "/tmp/hta-venv/bin/python"))
    ap.add_argument("--hta-repeat", type=int, default=3)
    ap.add_argument("--keep", help="write the runs under this directory and keep them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="perfscope-scale-") as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        base = root / "base.perfscope"
        if not base.exists():
            # In a child: Linux starts a child's ru_maxrss at its parent's resident size, so
            # this process must stay small for the children's peaks to be their own.
            _child("import sys; from perfscope.store.kineto import import_kineto; import_kineto([sys.argv[1]], sys.argv[2]); print('{}')",
                   args.trace, str(base))
        for n in (int(x) for x in args.ranks.split(",")):
            tile = args.tile_large if n >= args.large_from else args.tile
            straggler = n // 3
            run = root / f"n{n}-t{tile}.perfscope"
            row: dict = {"ranks": n, "tile": tile, "straggler": straggler, "load_average_before": os.getloadavg()}
            if not run.exists():
                row["write"] = _child(WRITE_CHILD, str(base), str(run), str(n), str(tile), str(straggler), str(int(args.delay_ms * 1e6)))
            row["bytes_on_disk"] = _du(run)
            row["analyze"] = _child(ANALYZE_CHILD, str(run))
            if n <= args.sizes_up_to:
                row["summaries"] = _child(SIZES_CHILD, str(run))
            if n == args.dask_at:
                row["dask"] = _child(DASK_CHILD, str(run), str(args.dask_workers))
            if str(n) in args.hta_at.split(","):
                folder = root / f"kineto-n{n}-t{tile}"
                if not folder.exists():
                    folder.mkdir()
                    _child(KINETO_CHILD, args.trace, str(folder), str(n), str(tile), str(straggler), str(int(args.delay_ms * 1e6)))
                row["hta"] = hta_side_by_side(folder, args.hta_python, args.hta_repeat, straggler)
            row["load_average_after"] = os.getloadavg()
            results.append(row)
            print(json.dumps(row) if args.json else _line(row), flush=True)
            if args.json:  # the table too, on stderr
                print(_line(row), file=sys.stderr, flush=True)
    return 0


def _line(row: dict) -> str:
    a = row["analyze"]
    s = (f"N={row['ranks']:5d} tile={row['tile']} events/rank={a['events'] // row['ranks']:,} disk={row['bytes_on_disk'] / 2**20:.1f} MiB "
         f"import={a['import_s']:.2f}s analyze={a['analyze_s']:.1f}s (CPU {a['analyze_cpu_s']:.1f}s) peak_rss={a['peak_rss_kb'] / 1024:.0f} MiB "
         f"({a['before_rss_kb'] / 1024:.0f} before reading) load={row['load_average_before'][0]:.1f}/{row['load_average_after'][0]:.1f} "
         f"straggler={a['top_straggler']} (injected {row['straggler']})")
    if "write" in row:
        s += f" write={row['write']['write_s']:.1f}s ({row['write']['peak_rss_kb'] / 1024:.0f} MiB)"
    if "summaries" in row:
        m = row["summaries"]
        s += f" summary={m['summary_bytes_median'] / 1024:.1f} KiB/rank (max {m['summary_bytes_max'] / 1024:.1f})"
    if "dask" in row:
        d = row["dask"]
        s += (f"\n        dask x{len(d['worker_peak_rss_kb'])}: cluster start={d['cluster_start_s']:.1f}s analyze={d['analyze_s']:.1f}s "
              f"(CPU client {d['client_cpu_s']:.1f}s, workers {d['workers_cpu_s']:.1f}s) "
              f"client rss={d['client_peak_rss_kb'] / 1024:.0f} MiB workers={[round(w / 1024) for w in d['worker_peak_rss_kb']]} MiB "
              f"straggler={d['top_straggler']} same json={d['same_json_as_one_process']}")
    if "hta" in row:
        h = row["hta"]
        m = h["medians"]
        s += (f"\n        kineto folder ({h['trace_bytes'] / 2**20:.0f} MiB gz), medians of {h['repeat']}, whole processes: "
              f"perfscope analyze DIR {m['perfscope']['wall_s']:.1f}s (CPU {m['perfscope']['cpu_s']:.1f}s, {m['perfscope']['rss_mb']:.0f} MiB) "
              f"straggler={h['perfscope_straggler']}; HTA {m['hta']['wall_s']:.1f}s (CPU {m['hta']['cpu_s']:.1f}s, {m['hta']['rss_mb']:.0f} MiB; "
              f"load + breakdown calls {m['hta']['calls_s']:.1f}s) -> {m['hta']['wall_s'] / m['perfscope']['wall_s']:.1f}x; "
              f"load {min(h['load_average']):.1f}-{max(h['load_average']):.1f}")
    return s


if __name__ == "__main__":
    sys.exit(main())
