"""Stragglers: which rank arrives last at collectives, how often, and what it costs.

Built on the matched operations of :func:`perfscope.analyzers.collectives.analyze_collectives`
(only operations seen on more than one rank count).  Point-to-point operations (Send, Recv,
SendRecv: pipeline stages, TorchRec's and expert parallelism's all-to-all) count only where
their sequence number and peer line up across ranks (:func:`reliable_matches`): matched by
order, two ranks' SendRecv kernels are often different exchanges with different peers, and
their start times say nothing about who is late, so they make no straggler claim.  Like TraceLens's arrival-last count and
DeepSpeed's straggler time, and unlike HTA's late-start-of-one-kernel heuristic, every
matched operation votes.
"""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

COLUMNS: tuple[str, ...] = ("rank", "ops", "last_count", "last_share", "mean_lateness_ns", "cost_to_others_ns")


def _empty() -> pd.DataFrame:
    """The table without rows (a copy of one built once: most runs have no collectives)."""
    return _empty_template().copy()


@functools.cache
def _empty_template() -> pd.DataFrame:
    """The frame :func:`_empty` copies (never handed out itself)."""
    return pd.DataFrame({c: np.zeros(0, np.float64 if c == "last_share" else np.int64) for c in COLUMNS})


P2P_FUNCS = frozenset({"Send", "Recv", "SendRecv"})


def reliable_matches(coll: pd.DataFrame) -> np.ndarray:
    """A bool array over ``coll``'s rows (output of ``analyze_collectives``): False for a
    point-to-point operation whose cross-rank match cannot be trusted: no sequence number
    (matched by order), or no ``peer`` column, or a peer outside the ranks it was matched
    with (each rank of a real exchange sends to or receives from another rank of it)."""
    if coll is None or len(coll) == 0:
        return np.zeros(0, dtype=bool)
    func = coll["func"].astype(object).to_numpy()
    p2p = np.isin(func, list(P2P_FUNCS))
    if not p2p.any():
        return np.ones(len(coll), dtype=bool)
    ok = ~p2p
    if "peer" in coll.columns and "seq" in coll.columns:
        seq_known = coll["seq"].notna().to_numpy(bool)
        peer = pd.to_numeric(coll["peer"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        key, rank = coll["match_key"].to_numpy(np.int64), coll["rank"].to_numpy(np.int64)
        # (operation, rank) pairs; the peer must be one of the operation's ranks.
        width = int(max(rank.max(initial=0), np.nanmax(peer, initial=0))) + 1
        members = key * width + rank
        has_peer = ~np.isnan(peer) & (np.nan_to_num(peer, nan=-1) >= 0)
        peer_in = np.zeros(len(coll), dtype=bool)
        peer_in[has_peer] = np.isin(key[has_peer] * width + peer[has_peer].astype(np.int64), members)
        ok |= p2p & seq_known & peer_in
    return ok


def rank_stragglers(coll: pd.DataFrame, min_skew_ns: int = 0) -> pd.DataFrame:
    """Rank the ranks by how much they hold the others up.

    Args:
        coll: output of ``analyze_collectives``.
        min_skew_ns: an operation whose spread of arrivals is at most this has no last rank.

    Returns:
        one row per rank: ``ops`` (matched operations it took part in), ``last_count`` (times
        it arrived last), ``last_share`` (last_count / ops), ``mean_lateness_ns`` (mean of
        arrival minus earliest arrival), ``cost_to_others_ns`` (total wait of the other ranks
        in the operations it arrived last at), sorted by ``cost_to_others_ns`` descending.
    """
    if coll is None or len(coll) == 0 or "matched_ranks" not in coll.columns:
        return _empty()
    m = coll[(coll["matched_ranks"] > 1).to_numpy(bool) & reliable_matches(coll)]
    if len(m) == 0:
        return _empty()
    spread = m.groupby("match_key", sort=False)["arrival_skew_ns"].transform("max")
    real = spread > min_skew_ns
    is_last = real & (m["rank"].to_numpy() == m["last_rank"].to_numpy(dtype="float64", na_value=np.nan))
    cost = m[real].groupby("match_key", sort=False)["wait_ns"].sum()
    last_of = m[is_last.to_numpy(bool)].drop_duplicates("match_key").set_index("match_key")["rank"]
    cost_by_rank = cost.reindex(last_of.index).groupby(last_of.to_numpy()).sum()
    g = m.groupby("rank")
    out = pd.DataFrame({
        "ops": g.size(),
        "last_count": is_last.groupby(m["rank"]).sum(),
        "mean_lateness_ns": g["arrival_skew_ns"].mean().round(),
    })
    out["last_share"] = out["last_count"] / out["ops"]
    out["cost_to_others_ns"] = cost_by_rank.reindex(out.index).fillna(0)
    out = out.reset_index().rename(columns={"index": "rank"})
    for c in ("rank", "ops", "last_count", "mean_lateness_ns", "cost_to_others_ns"):
        out[c] = out[c].astype("int64")
    return out[list(COLUMNS)].sort_values(["cost_to_others_ns", "last_count"], ascending=False, kind="stable").reset_index(drop=True)


__all__ = ["COLUMNS", "P2P_FUNCS", "rank_stragglers", "reliable_matches"]
