"""GPU counters: the NVML samples a run holds (the ``metrics`` table), as timeline tracks
and as a per-rank summary.  Pure: store tables in, DataFrames out, values in display units.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfscope.analyzers.sources import RunLike, WindowSource

# metric -> (label, unit, factor from the stored unit to the shown one, fixed top of the
# scale or None for the run's maximum), in track order.
COUNTERS: dict[str, tuple[str, str, float, float | None]] = {
    "sm_util_pct": ("GPU util", "%", 1.0, 100.0),
    "mem_util_pct": ("memory util", "%", 1.0, 100.0),
    "sm_clock_mhz": ("SM clock", "MHz", 1.0, None),
    "power_w": ("power", "W", 1.0, None),
    "mem_used_bytes": ("memory used", "GiB", 1.0 / 2**30, None),
    "pcie_tx_bytes_s": ("PCIe tx", "GB/s", 1e-9, None),
    "pcie_rx_bytes_s": ("PCIe rx", "GB/s", 1e-9, None),
}
# Samples are read this far around a window, so that a track crosses the whole window
# even when NVML sampled less often than the window is wide.
SAMPLE_MARGIN_NS = 2_000_000_000


def counter_summary(run: RunLike) -> pd.DataFrame:
    """Per rank and counter of :data:`COUNTERS` the run sampled: how many samples, their
    mean, minimum and maximum.

    Returns:
        DataFrame with ``rank``, ``metric`` (stored name), ``label``, ``unit`` (shown unit),
        ``samples`` (int), ``mean``, ``min``, ``max`` (float, in ``unit``) and ``scale``
        (the top of the counter's track: the fixed top, or the maximum over all ranks),
        ordered by rank then :data:`COUNTERS` order; empty (same columns) without samples.
    """
    m = run.table("metrics", None, ["rank", "metric", "value"])
    m = m[m["metric"].astype(str).isin(list(COUNTERS))]
    cols = ["rank", "metric", "label", "unit", "samples", "mean", "min", "max", "scale"]
    if m.empty:
        return pd.DataFrame({c: pd.Series([], dtype="float64" if c in ("mean", "min", "max", "scale") else object)
                             for c in cols})
    metric = m["metric"].astype(str)
    value = m["value"].to_numpy("float64") * metric.map({k: v[2] for k, v in COUNTERS.items()}).to_numpy("float64")
    df = pd.DataFrame({"rank": m["rank"].to_numpy("int64"), "metric": metric.to_numpy(object), "value": value})
    out = df.groupby(["rank", "metric"], sort=False)["value"].agg(samples="size", mean="mean", min="min",
                                                                   max="max").reset_index()
    top = out.groupby("metric")["max"].max()
    out["label"] = out["metric"].map(lambda k: COUNTERS[k][0])
    out["unit"] = out["metric"].map(lambda k: COUNTERS[k][1])
    out["scale"] = [COUNTERS[k][3] or max(float(top[k]), 1e-12) for k in out["metric"]]
    order = {k: i for i, k in enumerate(COUNTERS)}
    out = out.assign(_o=out["metric"].map(order)).sort_values(["rank", "_o"]).drop(columns="_o")
    return out[cols].reset_index(drop=True)


def counter_samples(run: WindowSource, rank: int, t0_ns: int, t1_ns: int) -> pd.DataFrame:
    """The samples of rank ``rank``'s counters (:data:`COUNTERS`) around ``[t0_ns, t1_ns)``:
    those inside, and the last before and first after it (within
    :data:`SAMPLE_MARGIN_NS`), so that a track spans the window.

    Returns:
        DataFrame with ``metric`` (str), ``ts_ns`` (int64, Unix epoch) and ``value``
        (float64, in the unit :data:`COUNTERS` shows), by metric then time.
    """
    m = run.window("metrics", rank, ["ts_ns", "metric", "value"], t0_ns - SAMPLE_MARGIN_NS, t1_ns + SAMPLE_MARGIN_NS)
    metric = m["metric"].astype(str)
    keep = metric.isin(list(COUNTERS)).to_numpy(bool)
    df = pd.DataFrame({"metric": metric.to_numpy(object)[keep], "ts_ns": m["ts_ns"].to_numpy("int64")[keep],
                       "value": m["value"].to_numpy("float64")[keep]})
    if df.empty:
        return df
    df["value"] *= df["metric"].map({k: v[2] for k, v in COUNTERS.items()}).to_numpy("float64")
    df = df.sort_values(["metric", "ts_ns"], kind="stable").reset_index(drop=True)
    ts = df["ts_ns"].to_numpy("int64")
    inside = (ts >= t0_ns) & (ts < t1_ns)
    before = np.flatnonzero(ts < t0_ns)
    after = np.flatnonzero(ts >= t1_ns)
    edge = np.zeros(len(df), bool)
    if len(before):  # the last sample before the window, per metric
        edge[df.iloc[before].groupby("metric", sort=False).tail(1).index] = True
    if len(after):  # the first after it
        edge[df.iloc[after].groupby("metric", sort=False).head(1).index] = True
    return df[inside | edge].reset_index(drop=True)


__all__ = ["COUNTERS", "SAMPLE_MARGIN_NS", "counter_samples", "counter_summary"]
