"""The advice engine: small rules that fire only on evidence from this run.

Each rule has an ``id``, the ``bucket`` it targets, a trigger (thresholds below, overridable
through ``AnalysisConfig.rule_thresholds``), the evidence (numbers from this run), an
expected saving per median step (ns and share) and the exact change to try.  Thresholds come
from the anchors where they exist (shared/research/anchors-analyzers.md): tb_plugin's 5 %
data-loading and 10 % communication shares, HTA's launch cut-offs, XProf's 15 % "all
others" tier, traceml's 85 % compute-bound share.

Savings come from the trace: each rule names a model of :mod:`.savings` (the step re-timed
with the fix applied) in its evidence as ``saving_model``, and claims that model's saving for
the median step; where no model can tell, the rule claims none and says so.  Savings rank the
advice, they do not promise a speed-up.  Recommendations are sorted by saving (largest
first); findings without an estimate and environment findings come after the others.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pandas as pd

from perfscope.analyzers.comm_families import COMM_ADVICE, COMM_FAMILY_SHARE, comm_mix, fp32_comm_share
from perfscope.analyzers.context import HardwareContext
from perfscope.analyzers.findings import environment_recommendations, trace_findings
from perfscope.analyzers.result import Recommendation
from perfscope.analyzers.savings import (
    NO_ESTIMATE,
    bandwidth_restored,
    comm_compressed,
    comm_overlapped,
    copies_overlapped,
    fp32_on_tensor_cores,
    host_idle_removed,
    loader_wait_removed,
    pinned_bandwidth,
    pinned_copies,
)
from perfscope.analyzers import uvm as _uvm  # noqa: F401 - registers the uvm.migrations rule
from perfscope.analyzers.rule_context import (
    DEFAULT_THRESHOLDS,
    EXPECTED_BUSBW_GBPS,
    RULES,
    Rule,
    RuleContext,
    _ms,
    _pct,
    _rec,
    rule,
)

FP32_GEMM_RE = re.compile(r"(?i)sgemm|gemm.*f32f32|gemm.*fp32|gemv.*float")
LOW_PRECISION_RE = re.compile(r"(?i)tf32|bf16|f16|fp16|h16|hgemm|s16816|s1688|h884|int8|i8i8|s8s8|e4m3|e5m2|fp8|f8f8|tensorop")


def _is_fp32_matmul(name: str) -> bool:
    """True for an FP32 GEMM/GEMV kernel name that names no lower precision."""
    # Every FP32_GEMM_RE match contains "gem" in some case (no other character folds to
    # g, e or m): a substring test rules out most names before the regexes run.
    return "gem" in name.lower() and bool(FP32_GEMM_RE.search(name)) and not LOW_PRECISION_RE.search(name)


# ----------------------------------------------------------------------------- data loading
@rule("dataloader.workers", "data_loading")
def dataloader_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when GPU-idle time waiting for the next batch is >= 5 % of the median step.
    Saving: :func:`~.savings.loader_wait_removed` (more workers and prefetching hide loading
    behind compute)."""
    dl = ctx.median("data_loading_ns")
    share = ctx.share(dl)
    if share < ctx.th("data_loading_share"):
        return None
    workers = _loader_workers(ctx.hw)
    return _rec(
        ctx, "dataloader.workers", "data_loading", "The GPU waits for input data",
        f"This run has high time cost on input data loading: {_pct(share)} of the step time ({_ms(dl)} per step) "
        "the GPU is idle while the host waits for the next batch. Load batches in parallel worker processes, "
        "keep the workers alive between epochs and prefetch more batches, so loading overlaps compute.",
        {"data_loading_ns_median": dl, "data_loading_share": round(share, 4), "median_step_ns": ctx.median_step_ns,
         **({"cpus_per_rank": ctx.hw.cpus_per_rank()} if ctx.hw.cpu_count is not None else {})},
        ctx.median_saving(loader_wait_removed(ctx.steps)),
        f"DataLoader(dataset, batch_size=..., num_workers={workers}, pin_memory=True, prefetch_factor=4, persistent_workers=True)",
        model="loader_wait_removed",
    )


def _loader_workers(hw: HardwareContext) -> int:
    """DataLoader workers to suggest: 8, but no more than the CPUs a rank has less the one its
    training process needs (a 2-CPU machine gets 1: more workers than cores only contend)."""
    cpus = hw.cpus_per_rank()
    return 8 if cpus is None else max(1, min(8, cpus - 1))


# ----------------------------------------------------------------------------- copies
def _pageable(ctx: RuleContext) -> tuple[int, int, int]:
    """(pageable copy ns, pageable copies, copy ns) per step, medians over all ranks' steps:
    the large pageable host-device copies inside the analysed windows (``Analysis.what_if``;
    warm-up copies outside them do not count) and the time any copy runs in them."""
    w = ctx.what_if
    if w is None or len(w) == 0 or len(w) != len(ctx.steps):
        return 0, 0, 0
    copy_ns = ctx.column("steps", "pcie_ns") + ctx.column("steps", "hidden_pcie_ns")
    return (int(np.median(w["pageable_copy_ns"].to_numpy())), int(round(float(np.median(w["pageable_copies"].to_numpy())))),
            int(np.median(copy_ns)))


@rule("copies.pageable", "pcie")
def pageable_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when host<->device copies (>= 64 KiB) from pageable memory take >= 1 % of the
    median step (copies inside the analysed steps only).  Saving:
    :func:`~.savings.pinned_copies`, at the bandwidth of the run's own pinned copies or of the
    GPU's PCIe link (:func:`~.savings.pinned_bandwidth`); none when the run tells neither."""
    p_ns, p_n, _ = _pageable(ctx)
    if ctx.share(p_ns) < ctx.th("pageable_share"):
        return None
    bw = pinned_bandwidth(ctx.copies, ctx.hw.pcie_gen, ctx.hw.pcie_width, ctx.hw.pcie_assumed)
    saving = ctx.median_saving(pinned_copies(ctx.what_if, ctx.steps, bw[0])) if bw else 0
    return _rec(
        ctx, "copies.pageable", "pcie", "Copies use pageable host memory",
        f"{p_n} host-device copies per step use PAGEABLE memory ({_ms(p_ns)} per step), which makes asynchronous "
        "copies block the host and run synchronously through a staging buffer. Use PINNED memory and "
        "non-blocking copies so they overlap compute.",
        {"pageable_copy_ns_per_step": p_ns, "pageable_copies_per_step": p_n,
         "pageable_copy_bytes_per_step": int(np.median(ctx.what_if["pageable_copy_bytes"].to_numpy())),
         "pcie_ns_median": ctx.median("pcie_ns"),
         **({"pinned_gbps": round(bw[0], 2), "pinned_gbps_from": bw[1]} if bw else {})},
        saving,
        "DataLoader(..., pin_memory=True) and batch = batch.to('cuda', non_blocking=True) "
        "(or tensor.pin_memory() for tensors you copy yourself)",
        model="pinned_copies",
        no_estimate="" if bw else ("the run has no pinned copy of 1 MiB or more and does not state its PCIe link, so "
                                   "the bandwidth pinned copies would reach is unknown"),
    )


@rule("pcie.exposed", "pcie")
def pcie_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when exposed copies (nothing else running) are >= 5 % of the median step and
    most copy time is not pageable (the pageable rule covers that). Saving:
    :func:`~.savings.copies_overlapped`; none when no GPU time is free to hide them under."""
    pcie = ctx.median("pcie_ns")
    share = ctx.share(pcie)
    if share < ctx.th("pcie_share"):
        return None
    p_ns, _, total = _pageable(ctx)
    if total > 0 and p_ns >= 0.5 * total:
        return None
    return _rec(
        ctx, "pcie.exposed", "pcie", "Host-device copies are not overlapped",
        f"{_pct(share)} of the step time ({_ms(pcie)} per step) only host-device copies run. Overlap them with "
        "compute: copy the next batch on a side stream with non_blocking=True while this one trains, keep tensors on "
        "the GPU between steps and avoid .cpu()/.numpy() inside the step.",
        {"pcie_ns_median": pcie, "pcie_share": round(share, 4), "copy_ns_per_step": total},
        saving := ctx.median_saving(copies_overlapped(ctx.steps)),
        "batch = batch.to('cuda', non_blocking=True) from pinned memory, prefetched one step ahead "
        "(e.g. a CUDA-stream prefetcher); move .cpu()/.item() logging out of the step",
        model="copies_overlapped",
        no_estimate="" if saving > 0 else "the GPU has no compute or communication free of copies to hide them under",
    )


# ----------------------------------------------------------------------------- sync
@rule("sync.host", "sync")
def sync_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when the host blocks on the GPU (synchronize calls, blocking copies other than
    large pageable ones, barriers) and the step re-timed without those waits
    (:func:`~.savings.sync_removed`) is >= 5 % of the median step shorter, or shorter at all
    on a launch-bound step (the syncs keep CUDA graphs from capturing it).  Saving: that.
    The GPU idle after a sync returns is not counted: it is the host's own work (the
    ``host.overhead`` rule's), which the sync only kept from overlapping the GPU's."""
    s = ctx.steps
    w = ctx.what_if
    if len(s) == 0 or "post_sync_idle_ns" not in s.columns or w is None or len(w) != len(s):
        return None
    med = ctx.median_saving(w["sync_removed_ns"].to_numpy())
    calls = float(np.median(ctx.column("steps", "sync_calls")))
    share = ctx.share(med)
    l = ctx.launch
    # CUDA graphs cannot capture a step that syncs: on a launch-bound step every sync is in
    # the way of launch.bound's fix, whatever its own saving (PREREQUISITES lists it first).
    prerequisite = l is not None and len(l) > 0 and bool(ctx.column("launch", "launch_bound").any())
    if calls <= 0 or med <= 0 or (share < ctx.th("sync_share") and not prerequisite):
        return None
    sites = _top_sync_sites(ctx)
    where = ("; the longest: " + ", ".join(f"{x['call']}" + (f" in {x['site']!r}" if x["site"] else "") + f" ({_ms(x['ns_per_step'])}/step)"
                                          for x in sites)) if sites else ""
    return _rec(
        ctx, "sync.host", "sync", "The host synchronises with the GPU every step",
        f"The host blocks on the GPU {calls:g} time(s) per step{where}; without those waits the host's later work "
        f"would overlap the GPU's and the step would be {_pct(share)} shorter ({_ms(med)}). Avoid excessive use of "
        "synchronization: remove .item(), .cpu(), print(loss) and torch.cuda.synchronize() from the step (log every "
        "N steps, keep running sums on the GPU), and use events (cudaStreamWaitEvent) instead of host syncs.",
        {"sync_calls_per_step": calls, "sync_removed_ns_median": med, **({"blocking_calls": sites} if sites else {}),
         "post_sync_idle_ns_median": ctx.median("post_sync_idle_ns"), "sync_ns_median": ctx.median("sync_ns")},
        med,
        "loss_sum += loss.detach()  # and call loss_sum.item() every N steps; drop torch.cuda.synchronize() in the loop",
        model="sync_removed",
    )


def _top_sync_sites(ctx: RuleContext, top: int = 3) -> list[dict[str, Any]]:
    """The blocking calls that take the most host time, per step of their rank: ``call``,
    ``site`` (the enclosing marker, "" when none), ``calls_per_step`` and ``ns_per_step``."""
    t = ctx.sync_sites
    if t is None or len(t) == 0:
        return []
    n_steps = ctx.steps_per_rank()
    per = n_steps.reindex(t["rank"]).fillna(1).clip(lower=1).to_numpy(float)
    g = pd.DataFrame({"call": t["call"], "site": t["site"], "calls": t["calls"] / per, "ns": t["total_ns"] / per})
    g = g.groupby(["call", "site"], sort=True)[["calls", "ns"]].mean().reset_index()
    g = g.sort_values(["ns", "call", "site"], ascending=[False, True, True], kind="stable").head(top)
    g = g[g["ns"] >= 0.05 * g["ns"].max()]  # the calls that matter, not every stray one
    return [{"call": str(r.call), "site": str(r.site), "calls_per_step": round(float(r.calls), 2), "ns_per_step": int(r.ns)}
            for r in g.itertuples()]


# ----------------------------------------------------------------------------- launch
@rule("launch.bound", "host")
def launch_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires on ranks :func:`~perfscope.analyzers.kernels.launch_stats` marks launch-bound.
    Saving (model ``launch_gaps_removed``): the launch idle (host_wait and kernel_wait gaps
    under 100 us, measured) per step, bounded by the host bucket."""
    l = ctx.launch
    if l is None or len(l) == 0 or not ctx.column("launch", "launch_bound").any():
        return None
    lb = l[l["launch_bound"]]
    ranks = tuple(int(r) for r in lb["rank"])
    n_steps = ctx.steps_per_rank()
    launch_idle = lb.set_index("rank")["launch_idle_ns"]
    per_step = (launch_idle / n_steps.reindex(lb["rank"]).fillna(1).clip(lower=1)).median()
    saving = min(float(per_step), ctx.median("host_ns", list(ranks)))
    k = lb.iloc[0]
    syncs = float(np.median(ctx.steps["sync_calls"])) if "sync_calls" in ctx.steps.columns and len(ctx.steps) else 0.0
    first = (f" First remove the {syncs:g} host synchronisation(s) per step: a graph cannot capture them." if syncs >= 1 else "")
    return _rec(
        ctx, "launch.bound", "host", "The step is launch-bound (many tiny kernels)",
        f"{int(k['kernels']) / max(int(n_steps.get(int(k['rank']), 1)), 1):,.0f} kernels per step on rank {int(k['rank'])}, "
        f"{_pct(float(k['short_share']))} of them shorter than the "
        f"{k['median_launch_cpu_ns'] / 1e3:.1f} us the CPU needs to launch one (median kernel "
        f"{k['median_kernel_ns'] / 1e3:.1f} us); the GPU waits for the host {_ms(saving)} per step. Capture the step "
        "with CUDA graphs or compile it so many small kernels become few launches, fuse small ops, or raise the batch size." + first,
        {"kernels": int(k["kernels"]), "short_share": round(float(k["short_share"]), 4), "sync_calls_per_step": syncs,
         "median_kernel_ns": int(k["median_kernel_ns"]), "median_launch_cpu_ns": int(k["median_launch_cpu_ns"]),
         "launch_idle_ns_per_step": int(per_step)},
        saving,
        'model = torch.compile(model, mode="reduce-overhead")  # CUDA graphs; or torch.cuda.graphs / torch.cuda.make_graphed_callables',
        ranks,
        model="launch_gaps_removed",
    )


@rule("host.overhead", "host")
def host_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when the GPU is idle for host reasons (Python, CPU work; the ``host`` bucket,
    which holds the idle after a sync returns too: the host's work there is what keeps the
    GPU waiting) >= 15 % of the median step and the rank is not launch-bound.

    Saving: :func:`~.savings.host_idle_removed`, never below the time the host needs to
    launch the step's kernels (kernels per step x the median launch call, from the launch
    table); host idle after a sync that removing the sync hides is the sync's saving."""
    s = ctx.steps
    if len(s) == 0:
        return None
    l = ctx.launch
    if l is not None and len(l) and ctx.column("launch", "launch_bound").any():
        return None
    med = ctx.median("host_ns")
    share = ctx.share(med)
    if share < ctx.th("host_share"):
        return None
    wall = ctx.median_step_ns
    busy = wall - ctx.median("gpu_idle_ns") if "gpu_idle_ns" in s.columns else 0
    floor = _launch_floor_ns(ctx)
    w = ctx.what_if
    synced = w["sync_removed_ns"].to_numpy() if w is not None and len(w) == len(s) and "post_sync_idle_ns" in s.columns else None
    saving = ctx.median_saving(host_idle_removed(s, floor, synced)) if "gpu_idle_ns" in s.columns else 0
    return _rec(
        ctx, "host.overhead", "host", "The GPU waits for the CPU",
        f"{_pct(share)} of the step time ({_ms(med)}) the GPU is idle while the host does other work (Python execution "
        "overhead, CPU preprocessing, logging). Find the host code with a CPU profiler and move it off the training "
        "thread, or compile the model to cut Python overhead. The saving assumes the idle time goes away down to the "
        f"time the host needs to launch the step's work ({_ms(floor)}).",
        {"host_ns_median": med, "host_share": round(share, 4), "gpu_busy_ns_median": int(busy), "launch_floor_ns": int(floor)},
        saving,
        "py-spy record -o profile.svg -- python train.py  # then torch.compile(model) / move CPU work to DataLoader workers",
        model="host_idle_removed",
    )


def _launch_floor_ns(ctx: RuleContext) -> int:
    """The host time the median rank needs per step just to launch its kernels: kernels per
    step x the median launch call's CPU time (0 without a launch table)."""
    l = ctx.launch
    if l is None or len(l) == 0 or "median_launch_cpu_ns" not in l.columns:
        return 0
    n_steps = ctx.steps_per_rank()
    per_rank = [float(row["kernels"]) / max(int(n_steps.get(int(row["rank"]), 1)), 1) * float(row["median_launch_cpu_ns"] or 0)
                for _, row in l.iterrows()]
    return int(np.median(per_rank)) if per_rank else 0


# ----------------------------------------------------------------------------- communication
@rule("comm.exposed", "network")
def comm_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when exposed communication is >= 10 % of the median step. Saving: the larger of
    :func:`~.savings.comm_overlapped` and :func:`~.savings.comm_compressed`; none when
    neither applies (fewer collectives would still help, by an amount the trace cannot tell).
    The advice follows the collective family holding at least half of the communication time
    (:data:`~.comm_families.COMM_ADVICE`); DDP bucket advice only when that is all-reduce."""
    net = ctx.median("network_ns")
    share = ctx.share(net)
    if share < ctx.th("network_share"):
        return None
    comp = ctx.median("compute_ns")
    hidden = ctx.median("hidden_network_ns")
    mix = comm_mix(ctx.collectives, ctx.kernels)
    family = max(mix, key=mix.get) if mix else None
    fp32 = fp32_comm_share(ctx.kernels)
    # The larger of the two trace-based savings: overlap with free compute, or bf16 compression.
    saving, model = max((ctx.median_saving(comm_overlapped(ctx.steps)), "comm_overlapped"),
                        (ctx.median_saving(comm_compressed(ctx.steps, fp32)), "comm_compressed"))
    if family in COMM_ADVICE and mix[family] >= COMM_FAMILY_SHARE:
        what, advice, change = COMM_ADVICE[family]
        what = f"; it is {what}, {_pct(mix[family])} of communication time"
    else:
        what = "; " + ", ".join(f"{f} {_pct(v)}" for f, v in sorted(mix.items(), key=lambda x: -x[1])) if mix else ""
        advice = ("Overlap communication with compute (issue it early, on its own stream), send fewer bytes (lower "
                  "precision), or communicate less often; the collective types below say which parallelism to tune.")
        change = "torch.profiler / perfscope analyze RUN --format json: see which collectives run exposed, then tune that parallelism"
    return _rec(
        ctx, "comm.exposed", "network", "Communication is not overlapped with compute",
        f"This run has high time cost on communication: {_pct(share)} of the step time ({_ms(net)}) communication "
        f"kernels run with no compute beside them ({_ms(hidden)} is already hidden){what}. {advice}",
        {"network_ns_median": net, "network_share": round(share, 4), "hidden_network_ns_median": hidden, "compute_ns_median": comp,
         "fp32_comm_share": round(fp32, 4), **{f"comm_share_{f}": round(v, 4) for f, v in mix.items()}},
        saving,
        change,
        model=model,
        no_estimate="" if saving > 0 else ("no compute time is free of communication to hide it under, no collective moves "
                                           "32-bit floats, and what fewer messages would save the trace cannot tell"),
    )


@rule("comm.straggler", "sync")
def straggler_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when one rank arrives last at >= half of the matched collectives and the others'
    wait for it is >= 2 % of the median step. Saving (model ``straggler_wait_removed``): the
    others' median collective wait, measured."""
    st = ctx.stragglers
    if st is None or len(st) == 0 or len(ctx.steps) == 0:
        return None
    top = st.iloc[0]
    if float(top["last_share"]) < ctx.th("straggler_last_share") or int(top["cost_to_others_ns"]) <= 0:
        return None
    r = int(top["rank"])
    others = [int(x) for x in ctx.steps["rank"].unique() if int(x) != r]
    wait = ctx.median("collective_wait_ns", others) if others else 0
    if ctx.share(wait) < ctx.th("straggler_cost_share"):
        return None
    return _rec(
        ctx, "comm.straggler", "sync", f"Rank {r} is a straggler",
        f"Rank {r} arrives last at {int(top['last_count'])} of {int(top['ops'])} collectives ({_pct(float(top['last_share']))}), "
        f"on average {float(top['mean_lateness_ns']) / 1e6:.2f} ms after the first rank; the other ranks wait "
        f"{_ms(wait)} per step for it. Compare rank {r} with the others: its input pipeline and data sizes (load "
        "imbalance), CPU contention and NUMA placement of its process, and its GPU's clocks and temperature.",
        {"straggler_rank": r, "last_count": int(top["last_count"]), "ops": int(top["ops"]),
         "last_share": round(float(top["last_share"]), 4), "mean_lateness_ns": int(top["mean_lateness_ns"]),
         "cost_to_others_ns": int(top["cost_to_others_ns"]), "others_wait_ns_per_step": wait},
        wait,
        f"perfscope analyze RUN --ranks {r} (its breakdown shows where it loses time); "
        f"nvidia-smi -q -d CLOCK,TEMPERATURE on rank {r}'s GPU; numactl --cpunodebind=N --membind=N for its process",
        (r,),
        model="straggler_wait_removed",
    )


def _same_gpu(meta: dict[str, Any]) -> bool:
    uuids = [((r.get("gpu") or {}).get("uuid") if isinstance(r.get("gpu"), dict) else None) for r in meta.get("ranks", [])]
    uuids = [u for u in uuids if u]
    return len(uuids) > 1 and len(set(uuids)) < len(uuids)


@rule("nccl.low_busbw", "network")
def busbw_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when large collectives (>= 1 MiB) reach less than a quarter of the bus bandwidth
    a healthy link gives (NVLink within a node, InfiniBand across nodes) and communication
    is >= 10 % of the step; not when ranks share one GPU. Saving:
    :func:`~.savings.bandwidth_restored`."""
    c = ctx.collectives
    net = ctx.median("network_ns")
    if c is None or len(c) == 0 or ctx.share(net) < ctx.th("network_share") or _same_gpu(ctx.meta):
        return None
    big = c[(pd.to_numeric(c["bytes"], errors="coerce") >= ctx.th("busbw_min_bytes")) & c["busbw_gbps"].notna()]
    if len(big) == 0:
        return None
    bw = float(big["busbw_gbps"].median())
    hosts = {r.get("host") for r in ctx.meta.get("ranks", []) if r.get("host")}
    where = "inter_node" if len(hosts) > 1 else "intra_node"
    expected = EXPECTED_BUSBW_GBPS[where]
    if bw >= ctx.th("busbw_fraction") * expected:
        return None
    env = (ctx.meta.get("environment") or {})
    # The doctor's snapshot keeps NCCL_* variables under facts.env.nccl.
    nccl_env = ((env.get("facts") or {}).get("env") or {}).get("nccl") or env.get("nccl_env") or {}
    keys = ["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL", "NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS"]
    current = {k: nccl_env.get(k) for k in keys if isinstance(nccl_env, dict)}
    return _rec(
        ctx, "nccl.low_busbw", "network", "Collectives reach low bus bandwidth",
        f"Collectives of 1 MiB or more reach a median bus bandwidth of {bw:.1f} GB/s, far below the ~{expected:.0f} GB/s "
        f"an {'InfiniBand network' if where == 'inter_node' else 'NVLink node'} usually gives. NCCL may be using the wrong "
        "interface or transport: check which NIC and transport it picked (NCCL_DEBUG=INFO) and set the variables below.",
        {"busbw_gbps_median": round(bw, 3), "expected_busbw_gbps": expected, "collectives_judged": int(len(big)),
         **{k: v for k, v in current.items() if v is not None}},
        ctx.median_saving(bandwidth_restored(ctx.steps, bw, expected)),
        "NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=<fast NIC, e.g. ib0 or eth0> NCCL_IB_HCA=<mlx5_0,...> NCCL_P2P_LEVEL=NVL "
        "NCCL_NET_GDR_LEVEL=PHB NCCL_NSOCKS_PERTHREAD=4 NCCL_SOCKET_NTHREADS=2",
        model="bandwidth_restored",
    )


# ----------------------------------------------------------------------------- compute
@rule("compute.bound", "compute")
def compute_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when compute is >= 85 % of the median step. Saving:
    :func:`~.savings.fp32_on_tensor_cores` when FP32 matrix kernels are >= 20 % of kernel time
    and the GPU has tensor cores for a lower precision; otherwise none (what fusion gains
    depends on the kernels: the trace cannot tell).

    Hardware: TF32 and bfloat16 need compute capability 8.0 (Ampere); 7.x (Volta, Turing) gets
    float16 autocast with a GradScaler; below 7.0 (no tensor cores) gets no precision advice."""
    comp = ctx.median("compute_ns")
    share = ctx.share(comp)
    if share < ctx.th("compute_share"):
        return None
    k = ctx.kernels
    fp32_share = 0.0
    if k is not None and len(k):
        # At most top_kernels names per rank: a Python loop over them is cheapest.
        fp32 = np.array([_is_fp32_matmul(n) for n in map(str, k["name"].to_numpy(object))], dtype=bool)
        total = k["total_ns"].to_numpy(float)
        tot = total[k["kind"].to_numpy(object) == "compute"].sum()
        fp32_share = float(total[fp32].sum() / tot) if tot > 0 else 0.0
    precision = _precision_advice(ctx.hw) if fp32_share >= 0.2 else None
    if precision is not None:
        saving = ctx.median_saving(fp32_on_tensor_cores(ctx.column("steps", "compute_ns"), fp32_share))
        msg = (f"The step is compute-bound ({_pct(share)} compute) and {_pct(fp32_share)} of kernel time is FP32 matrix "
               f"math. Run matrix multiplies on tensor cores: {precision[0]}")
        change = precision[1]
    else:
        saving = 0
        msg = (f"The step is compute-bound ({_pct(share)} compute): speed up the kernels themselves. Compile the model to "
               "fuse elementwise ops, use fused optimizers and fused attention, and check the top kernels below.")
        change = "model = torch.compile(model); torch.optim.AdamW(params, fused=True); F.scaled_dot_product_attention"
    evidence = {"compute_ns_median": comp, "compute_share": round(share, 4), "fp32_matmul_share": round(fp32_share, 4)}
    if ctx.hw.compute_capability is not None:
        evidence["compute_capability"] = ctx.hw.to_dict()["compute_capability"]
    return _rec(ctx, "compute.bound", "compute", "The step is compute-bound", msg, evidence, saving, change,
                model="fp32_on_tensor_cores",
                no_estimate="" if precision is not None else "what fusion and faster kernels gain depends on the kernels")


def _precision_advice(hw: HardwareContext) -> tuple[str, str] | None:
    """(advice, change) for running FP32 matrix math on tensor cores, fitted to the GPU's
    compute capability; None when the GPU has no tensor cores (below 7.0)."""
    if hw.cc_at_least(8) is False:
        if hw.cc_at_least(7) is False:
            return None
        cc = hw.to_dict()["compute_capability"]
        name = f"{hw.gpu_name}, " if hw.gpu_name else ""
        return (f"this GPU ({name}compute capability {cc}) has float16 tensor cores, so train in float16 with "
                "autocast and a gradient scaler.",
                "scaler = torch.cuda.amp.GradScaler(); with torch.autocast('cuda', dtype=torch.float16): loss = model(x); "
                "scaler.scale(loss).backward(); scaler.step(opt); scaler.update()")
    return ("allow TF32, or train in bfloat16 with autocast.",
            "torch.backends.cuda.matmul.allow_tf32 = True; with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(x)")


# A fix that must come first for another to work: CUDA graphs and
# torch.compile(mode="reduce-overhead") cannot capture a step that synchronises with the
# host (.item(), .cpu(), torch.cuda.synchronize() break the graph), so when a launch-bound
# step also syncs with the host, removing the syncs is listed first.
PREREQUISITES: dict[str, tuple[str, ...]] = {"sync.host": ("launch.bound",)}


def _cap_to_step(ctx: RuleContext, recs: list[Recommendation]) -> list[Recommendation]:
    """Cap savings, largest first, so that together they never exceed the median step: a
    capped finding says so in its message and keeps its uncapped estimate in its evidence."""
    left = ctx.median_step_ns
    out = []
    for r in recs:
        if r.saving_ns > left:
            r = dataclasses.replace(
                r, saving_ns=max(left, 0), saving_share=round(ctx.share(max(left, 0)), 4),
                evidence={**r.evidence, "uncapped_saving_ns": r.saving_ns},
                message=r.message + " (Saving capped: the findings above already account for the rest of the step.)")
        left -= r.saving_ns
        out.append(r)
    return out


def evaluate_rules(ctx: RuleContext) -> list[Recommendation]:
    """Run every rule; return the recommendations that fired with a positive saving or with
    one the trace cannot tell (:data:`~.savings.NO_ESTIMATE`), largest saving first (rule
    order breaks ties) except that a prerequisite (:data:`PREREQUISITES`) is moved just
    before the first recommendation it enables; their savings capped to the median step in
    total (:func:`_cap_to_step`); then environment findings.  When :func:`trace_findings`
    fires, its findings replace the rules' (before the environment findings)."""
    findings = trace_findings(ctx)
    if findings:
        return [_no_saving(r) for r in findings + environment_recommendations(ctx)]
    fired: list[tuple[int, Recommendation]] = []
    for i, r in enumerate(RULES):
        rec = r.fn(ctx)
        # A finding whose fix would save nothing measurable here is not advice; one whose
        # saving the trace cannot tell is (it says so).
        if rec is not None and (rec.saving_ns > 0 or rec.evidence.get("saving_model") == NO_ESTIMATE):
            fired.append((i, rec))
    fired.sort(key=lambda x: (-x[1].saving_ns, x[0]))
    recs = _cap_to_step(ctx, [r for _, r in fired])
    for pre, enables in PREREQUISITES.items():
        ids = [r.id for r in recs]
        if pre not in ids:
            continue
        targets = [ids.index(t) for t in enables if t in ids]
        if targets and min(targets) < ids.index(pre):
            rec = recs.pop(ids.index(pre))
            enabled = recs[min(targets)].id
            rec = dataclasses.replace(rec, message=rec.message + f" Listed before {enabled}: that fix needs this one first.")
            recs.insert(min(targets), rec)
    return recs + [_no_saving(r) for r in environment_recommendations(ctx)]


def _no_saving(rec: Recommendation) -> Recommendation:
    """``rec`` (a trace or environment finding, which claims no saving) with
    ``saving_model`` :data:`~.savings.NO_ESTIMATE` in its evidence, as every finding names its model."""
    return dataclasses.replace(rec, evidence={**rec.evidence, "saving_model": NO_ESTIMATE})


__all__ = ["DEFAULT_THRESHOLDS", "PREREQUISITES", "RULES", "Rule", "RuleContext", "evaluate_rules", "environment_recommendations", "rule", "trace_findings"]
