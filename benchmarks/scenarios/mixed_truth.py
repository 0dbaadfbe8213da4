"""The ground-truth file every mixed-cause workload writes (no framework imported here, so
JAX and plain-CUDA workloads share it with the PyTorch ones of ``mixed_common.py``).

``$MIXED_TRUTH`` (JSON) holds every step window's wall time and injected costs, and per
injected component its kind, size, the buckets perfscope should put its time in, the
finding it should raise, its total cost and its share ``sum(cost) / sum(wall)``.
"""
from __future__ import annotations

import json
import os
from typing import Any


def write_truth(name: str, spec: dict[str, float], windows: list[dict],
                kinds: dict[str, tuple[list[str], str | None]], about: dict[str, Any]) -> None:
    """Write the measured costs of workload ``name`` and the injected share of each
    component (``kinds`` maps a component kind to its buckets and finding; ``about`` names
    the GPU and the framework) to ``$MIXED_TRUTH`` (default ``<name>.truth.json``)."""
    wall = sum(w["wall_ms"] for w in windows)
    components = []
    for kind, size in spec.items():
        buckets, finding = kinds[kind]
        cost = sum(w["costs_ms"][kind] for w in windows)
        components.append({"kind": kind, "size": size, "buckets": buckets, "finding": finding,
                           "cost_ms": cost, "share": cost / wall})
    truth = {"workload": name, **about, "wall_ms": wall, "windows": windows,
             "components": sorted(components, key=lambda c: -c["cost_ms"])}
    with open(os.environ.get("MIXED_TRUTH", f"{name}.truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
