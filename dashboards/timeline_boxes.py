"""From a lane's events to the boxes the Timeline draws: pure functions on arrays.

A lane of a million kernels is drawn as at most a few thousand boxes.  Events at least a
pixel wide stay whole, at their true width.  Narrower ones are merged per pixel column
into a **density strip**: a box a third of the lane's height, as wide as the merged
events' span (at least one pixel), whose opacity grows with the share of that span the
events were busy.  So a 0.9 µs kernel on a mostly idle stream is a faint thin tick, not a
solid pixel that reads as work, and a solid run of sub-pixel kernels still reads as busy.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

BOX_COLUMNS = ("start_ns", "dur_ns", "label", "count", "busy", "kind", "row")


def _empty_boxes() -> pd.DataFrame:
    return pd.DataFrame({"start_ns": np.zeros(0, "int64"), "dur_ns": np.zeros(0, "int64"),
                         "label": np.zeros(0, object), "count": np.zeros(0, "int64"),
                         "busy": np.zeros(0, "float64"), "kind": np.zeros(0, object), "row": np.zeros(0, "int64")})


def aggregate_events(
    start_ns: np.ndarray,
    dur_ns: np.ndarray,
    names: Sequence[object] | np.ndarray,
    t0_ns: int,
    t1_ns: int,
    width_px: int = 1200,
    max_boxes: int = 2000,
    kinds: Sequence[object] | np.ndarray | None = None,
) -> pd.DataFrame:
    """Reduce one lane's events to at most ``max_boxes + width_px`` boxes for drawing.

    Events at least one pixel wide (``(t1 - t0) / width_px`` ns) are kept as they are (the
    ``max_boxes`` longest if there are more); the rest are merged per pixel column (by
    start) into one box labelled ``k events (e.g. NAME)``, spanning the first start to the
    last end of the merged events.

    Returns:
        DataFrame with ``start_ns``, ``dur_ns`` (int64 ns), ``label`` (str, raw, not
        escaped), ``count`` (events in the box; 1 for a whole event), ``busy`` (0..1: summed
        event time over the box's span, at least one pixel; 1.0 for a whole event),
        ``kind`` (colour class of the box's longest event, ``""`` without ``kinds``) and
        ``row`` (position of the box's event in the input; -1 for a box of several),
        sorted by ``start_ns``.
    """
    start = np.asarray(start_ns, dtype="int64")
    dur = np.maximum(np.asarray(dur_ns, dtype="int64"), 0)
    labels = np.asarray(names, dtype=object)
    kind = np.full(start.size, "", object) if kinds is None else np.asarray(kinds, dtype=object)
    if start.size == 0:
        return _empty_boxes()
    px_ns = max((int(t1_ns) - int(t0_ns)) / max(width_px, 1), 1.0)
    big = _wide_enough(dur, px_ns, max_boxes)
    idx = np.flatnonzero(big)
    kept = pd.DataFrame({"start_ns": start[big], "dur_ns": dur[big], "label": labels[big], "count": 1,
                         "busy": 1.0, "kind": kind[big], "row": idx})
    small = ~big
    if small.any():
        merged = _merge_per_pixel(start[small], dur[small], labels[small], kind[small], np.flatnonzero(small),
                                  int(t0_ns), px_ns)
        kept = pd.concat([kept, merged], ignore_index=True) if len(kept) else merged
    return kept.sort_values("start_ns", kind="stable").reset_index(drop=True).astype(
        {"start_ns": "int64", "dur_ns": "int64", "count": "int64", "row": "int64"})


def _wide_enough(dur: np.ndarray, px_ns: float, max_boxes: int) -> np.ndarray:
    """The events drawn whole: at least a pixel wide, the ``max_boxes`` longest of them."""
    big = dur >= px_ns
    if big.sum() > max_boxes:
        cut = np.partition(dur[big], -max_boxes)[-max_boxes]
        big = dur >= max(cut, px_ns)
        if big.sum() > max_boxes:
            idx = np.flatnonzero(big)
            big[idx[np.argsort(dur[idx], kind="stable")[:-max_boxes]]] = False
    return big


def _merge_per_pixel(s: np.ndarray, d: np.ndarray, n: np.ndarray, k: np.ndarray, rows: np.ndarray, t0: int,
                     px_ns: float) -> pd.DataFrame:
    """One box per occupied pixel column (by start) of the sub-pixel events (``rows``:
    their positions in the lane): see :func:`aggregate_events` for the columns."""
    bins = np.floor((s - t0) / px_ns).astype("int64")
    e = s + d
    if (np.diff(bins) < 0).any():  # a lane comes sorted by start: sort only when it is not
        order = np.argsort(bins, kind="stable")
        bins, s, e, d, n, k, rows = bins[order], s[order], e[order], d[order], n[order], k[order], rows[order]
    first_idx = np.flatnonzero(np.diff(bins, prepend=bins[0] - 1))  # where each pixel's run starts
    counts = np.diff(np.append(first_idx, len(bins)))
    box_start = np.minimum.reduceat(s, first_idx)
    box_end = np.maximum.reduceat(e, first_idx)
    busy = np.add.reduceat(d, first_idx) / np.maximum(box_end - box_start, px_ns)
    # The colour of a box is its longest event's: a pixel of NCCL with one tiny kernel reads as network.
    longest = _argmax_per_run(d, first_idx)
    first = n[first_idx]
    label = np.array([str(f) if c == 1 else f"{c:,} events (e.g. {f})" for f, c in zip(first, counts)], dtype=object)
    return pd.DataFrame({"start_ns": box_start, "dur_ns": box_end - box_start, "label": label, "count": counts,
                         "busy": np.minimum(busy, 1.0), "kind": k[longest],
                         "row": np.where(counts == 1, rows[first_idx], -1)})


def _argmax_per_run(values: np.ndarray, first_idx: np.ndarray) -> np.ndarray:
    """Index (into ``values``) of the largest value of each run starting at ``first_idx``."""
    run_id = np.repeat(np.arange(len(first_idx)), np.diff(np.append(first_idx, len(values))))
    order = np.lexsort((-values, run_id))  # by run, largest first
    return order[np.searchsorted(run_id[order], np.arange(len(first_idx)))]


def label_for_width(label: str, width_px: float, char_px: float = 6.5, min_px: float = 36.0) -> str:
    """The text drawn on a box ``width_px`` wide: ``label`` cut to fit (an ellipsis marks
    the cut), or ``""`` when the box is too narrow for a readable name."""
    if width_px < min_px:
        return ""
    fit = int((width_px - 6) / char_px)
    if fit < 4:
        return ""
    return label if len(label) <= fit else label[: fit - 1] + "…"


def search_mask(names: np.ndarray, query: str | None) -> np.ndarray:
    """True where ``query`` (case-insensitive, plain text, not a pattern) is part of the
    name; all False for an empty query.  Decided once per distinct name."""
    if not query or not query.strip():
        return np.zeros(len(names), bool)
    q = query.strip().lower()
    codes, uniq = pd.factorize(np.asarray(names, dtype=object))  # hashing: no sort of a million strings
    hit = np.fromiter((q in str(u).lower() for u in uniq), dtype=bool, count=len(uniq))
    return hit[codes] if len(codes) else np.zeros(0, bool)


__all__ = ["BOX_COLUMNS", "aggregate_events", "label_for_width", "search_mask"]
