"""Unified Memory: what page migrations and faults cost a rank's steps (the ``uvm`` table),
and the advice rule that reads it (``uvm.migrations``, registered with the other rules).

Migrations (``htod``, ``dtoh``, ``dtod`` rows) move pages across the host link or between
devices, so their time joins the copies in the ``pcie`` layer of the breakdown (a migration
while a kernel runs stays ``compute``: the kernel is what waits for it, and the sweep
reports the overlap as hidden PCIe).  GPU page-fault groups are the time kernels stall on
missing pages; they are evidence for the prefetch advice, not a layer of their own.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfscope.analyzers.classify import name_values
from perfscope.analyzers.columns import Columns, n_rows
from perfscope.analyzers.intervals import I64, as_i64, covered_ns, filled_i64, merge
from perfscope.analyzers.result import Recommendation
from perfscope.analyzers.rule_context import RuleContext, _ms, _pct, _rec, rule

MIGRATION_KINDS: tuple[str, ...] = ("htod", "dtoh", "dtod")
#: one row per rank: the rank's Unified Memory activity inside its step windows
UVM_COLUMNS: tuple[str, ...] = (
    "rank", "steps", "htod_bytes", "dtoh_bytes", "migrations", "migration_ns", "cpu_faults", "gpu_faults",
    "gpu_fault_ns", "uvm_ns",
)


def _intervals(uvm: Columns, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = as_i64(uvm["start_ns"])[mask]
    return s, s + as_i64(uvm["dur_ns"])[mask]


def migration_intervals(uvm: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) int64 ns of the migrations in one rank's ``uvm`` columns, merged."""
    if n_rows(uvm) == 0:
        return np.zeros(0, I64), np.zeros(0, I64)
    return merge(*_intervals(uvm, np.isin(name_values(uvm["kind"]), MIGRATION_KINDS)))


def uvm_row(rank: int, uvm: Columns, ws: np.ndarray, we: np.ndarray) -> dict[str, int] | None:
    """One rank's Unified Memory activity inside its step windows ``[ws, we)`` (int64 ns).

    Returns:
        the :data:`UVM_COLUMNS` values: ``steps`` (windows), ``htod_bytes``/``dtoh_bytes``
        (bytes migrated, by direction), ``migrations`` (migration records), ``migration_ns``
        (time some migration ran), ``cpu_faults``/``gpu_faults`` (page faults counted),
        ``gpu_fault_ns`` (time some GPU fault group was being served) and ``uvm_ns`` (time
        either ran), all summed over the windows, events counted by their start; None when
        the rank has no event inside them.
    """
    if n_rows(uvm) == 0 or len(ws) == 0:
        return None
    start = as_i64(uvm["start_ns"])
    ws, we = as_i64(ws), as_i64(we)
    order = np.argsort(ws, kind="stable")
    lo, hi = ws[order], we[order]
    k = np.searchsorted(lo, start, side="right") - 1
    inside = (k >= 0) & (start < hi[np.clip(k, 0, None)])
    if not inside.any():
        return None
    kind = name_values(uvm["kind"])
    mig = np.isin(kind, MIGRATION_KINDS)
    gpu_fault = kind == "gpu_page_fault"
    nbytes, faults = filled_i64(uvm["bytes"]), filled_i64(uvm["faults"])

    def total(values: np.ndarray, mask: np.ndarray) -> int:
        return int(values[mask & inside].sum())

    m_iv, f_iv = _intervals(uvm, mig), _intervals(uvm, gpu_fault)
    both = (np.concatenate([m_iv[0], f_iv[0]]), np.concatenate([m_iv[1], f_iv[1]]))
    return {
        "rank": int(rank), "steps": int(len(ws)),
        "htod_bytes": total(nbytes, kind == "htod"), "dtoh_bytes": total(nbytes, kind == "dtoh"),
        "migrations": int((mig & inside).sum()),
        "migration_ns": int(covered_ns(ws, we, *m_iv).sum()),
        "cpu_faults": total(faults, kind == "cpu_page_fault"), "gpu_faults": total(faults, gpu_fault),
        "gpu_fault_ns": int(covered_ns(ws, we, *f_iv).sum()),
        "uvm_ns": int(covered_ns(ws, we, *both).sum()),
    }


def uvm_frame(rows: list[dict[str, int]]) -> pd.DataFrame:
    """The per-rank rows of :func:`uvm_row` as a frame with :data:`UVM_COLUMNS` (int64),
    ordered by rank; empty (with the columns) when no rank used Unified Memory."""
    if not rows:
        return pd.DataFrame({c: np.zeros(0, I64) for c in UVM_COLUMNS})
    return pd.DataFrame(rows, columns=list(UVM_COLUMNS)).sort_values("rank", kind="stable").reset_index(drop=True).astype("int64")


@rule("uvm.migrations", "pcie")
def uvm_rule(ctx: RuleContext) -> Recommendation | None:
    """Fires when Unified Memory migrations and GPU fault service take >= 2 % of the median
    step (per step of the median rank). Saving: that time less what one bulk prefetch of the
    same bytes takes at ``uvm_prefetch_gbps`` (prefetched pages move in large transfers ahead
    of use instead of fault by fault)."""
    u = ctx.uvm
    if u is None or len(u) == 0:
        return None
    steps = np.maximum(u["steps"].to_numpy(float), 1)
    per_step = {c: float(np.median(u[c].to_numpy(float) / steps)) for c in
                ("uvm_ns", "migration_ns", "gpu_fault_ns", "htod_bytes", "dtoh_bytes", "cpu_faults", "gpu_faults")}
    t = per_step["uvm_ns"]
    if ctx.share(t) < ctx.th("uvm_share"):
        return None
    moved = per_step["htod_bytes"] + per_step["dtoh_bytes"]
    bulk_ns = moved / ctx.th("uvm_prefetch_gbps")  # bytes / (GB/s) = ns
    return _rec(
        ctx, "uvm.migrations", "pcie", "Unified Memory pages migrate on demand",
        f"Each step migrates {per_step['htod_bytes'] / 2**20:.1f} MiB to the GPU and {per_step['dtoh_bytes'] / 2**20:.1f} MiB "
        f"back through page faults ({per_step['cpu_faults']:,.0f} CPU and {per_step['gpu_faults']:,.0f} GPU faults); "
        f"migrating and serving faults takes {_pct(ctx.share(t))} of the step ({_ms(t)}). Prefetch managed memory to "
        "the processor that uses it next and advise where it lives, so pages move in bulk ahead of use.",
        {**{f"{k}_per_step": round(v) for k, v in per_step.items()}, "prefetch_estimate_ns": round(bulk_ns)},
        max(0.0, t - bulk_ns),
        "cudaMemPrefetchAsync(ptr, nbytes, device, stream) before the kernels that touch it (and to cudaCpuDeviceId "
        "before host access); cudaMemAdvise(ptr, nbytes, cudaMemAdviseSetPreferredLocation, device)",
        model="uvm_prefetched",
    )


__all__ = ["MIGRATION_KINDS", "UVM_COLUMNS", "migration_intervals", "uvm_row", "uvm_frame", "uvm_rule"]
