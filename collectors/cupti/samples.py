"""Raw-record samples: what the native sink handed Python, saved for decoder tests.

A sample is one ``.npz`` file: one uint8 array per layout name (``kernel``, ``memcpy``,
``memset``, ``sync``, ``runtime``, ``driver``, ``marker``, ``overhead``) holding whole
records exactly as the sink copied them out of CUPTI's buffers (string fields replaced
by string-table ids), ``strings`` (the string table, NUL-separated) and ``meta`` (JSON:
CUPTI version, clock offset, record counts, where it was recorded).  The GPU workload
(tests/gpu/cupti_workload.py --samples DIR) writes them; tests/data/cupti/ keeps a few.
"""
from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perfscope.collectors.cupti import decode, layouts

#: most records of one kind kept in a sample (keeps committed samples small)
DEFAULT_LIMITS = {"kernel": 400, "runtime": 400, "driver": 200, "marker": 200, "sync": 200,
                  "memcpy": 200, "memcpy2": 50, "memset": 100, "overhead": 50}


def save(folder: Path, drains: Sequence[dict[str, np.ndarray]], collector: Any, *, note: str = "",
         limits: dict[str, int] | None = None, name: str = "sample") -> Path:
    """Save the raw drains of a collector run as ``folder/<name>.npz``; returns the path.

    Records of each kind are concatenated over the drains in delivery order and cut to
    ``limits`` (DEFAULT_LIMITS) records.
    """
    limits = {**DEFAULT_LIMITS, **(limits or {})}
    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {}  # savez keywords (Any: numpy types its allow_pickle keyword too)
    counts: dict[str, int] = {}
    for kind in layouts.BY_NAME:
        parts = [d[kind] for d in drains if kind in d and d[kind].size]
        if not parts:
            continue
        raw = np.concatenate(parts)
        size = layouts.BY_NAME[kind].dtype.itemsize
        n = min(raw.size // size, limits.get(kind, 100))
        arrays[kind] = raw[: n * size]
        counts[kind] = n
    strings = "\0".join(collector._strings.strings).encode()
    meta = {
        "cupti_api_version": layouts.CUPTI_API_VERSION,
        "clock_offset_ns": collector.clock_offset_ns,
        "counts": counts,
        "note": note,
        "host": platform.node(),
    }
    try:
        import torch

        meta["torch"] = torch.__version__
        meta["gpu"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - metadata only
        pass
    path = folder / f"{name}.npz"
    np.savez_compressed(path, strings=np.frombuffer(strings, np.uint8),
                        meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
    return path


def load(path: Path) -> tuple[dict[str, np.ndarray], decode.StringTable, dict[str, Any]]:
    """Read a sample: (raw bytes per layout name, string table, meta dict)."""
    with np.load(path) as z:
        raw = {k: z[k] for k in z.files if k in layouts.BY_NAME}
        blob = z["strings"].tobytes()
        meta = json.loads(z["meta"].tobytes().decode())
    table = decode.StringTable()
    if blob:
        table.extend(blob + b"\0", 0)
    return raw, table, meta
