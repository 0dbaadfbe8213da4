"""Sorting a chunk of events into the kinds the tables keep (:class:`Classified`), and
the same rules for the native pre-filter (:data:`FILTER_RULES`)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from perfscope.store.kineto import prefilter
from perfscope.store.kineto.decode import decode_args_batch
from perfscope.store.kineto.events import (
    API_ARGS_LIST_DECODER,
    ARGS_LIST_DECODER,
    PHASE_TYPES,
    Event,
)
from perfscope.store.kineto.checks import step_number
from perfscope.store.kineto.parse import STEP_RE


#: Names of cpu_op events that other tables than ``operators`` keep (record_param_comms
#: ops, old-style steps).
CPU_OP_PREFIXES = ("record_param_comms", "ProfilerStep#")
_NAME = attrgetter("name")
#: Kineto category -> the kind (:class:`Classified` list) its kept events go to.
CAT_KIND = {
    "cpu_op": "cpu_op", "cuda_runtime": "api", "cuda_driver": "api", "kernel": "kernels",
    "user_annotation": "annotations", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync",
    "gpu_user_annotation": "gpu_markers", "perfscope_host": "host", "perfscope_collective": "colls",
    "perfscope_metric": "metrics", "python_function": "python_function",
}


def kept_phase(kind: str) -> str:
    """The phase of the events of ``kind`` (a value of :data:`CAT_KIND`) that are kept:
    counters (``C``) for metrics, complete events (``X``) for every other kind."""
    return "C" if kind == "metrics" else "X"


@dataclass
class Classified:
    """One rank's events that some table needs, by kind, with their args decoded."""

    kernels: list[Event] = field(default_factory=list)
    memcpy: list[Event] = field(default_factory=list)
    memset: list[Event] = field(default_factory=list)
    sync: list[Event] = field(default_factory=list)
    api: list[Event] = field(default_factory=list)
    markers: list[Event] = field(default_factory=list)
    gpu_markers: list[Event] = field(default_factory=list)
    steps: list[tuple[int, Event]] = field(default_factory=list)
    host: list[Event] = field(default_factory=list)
    colls: list[Event] = field(default_factory=list)
    metrics: list[Event] = field(default_factory=list)
    rpc: list[Event] = field(default_factory=list)
    #: cpu_op events, then python_function events (the ``operators`` table).
    operators: list[Event] = field(default_factory=list)

    def add(self, events: Iterable[Event]) -> None:
        """Sort ``events`` into their kinds and decode the kept ones' args.

        Everything else (flows, metadata, instants) is dropped, and with it the chunk's
        text, since kept events no longer point into it.
        """
        by_cat: dict[Any, list[Event]] = {cat: [] for cat in CAT_KIND}
        get = by_cat.get
        for e in events:
            # One dict probe per event: most events (cpu_op aside) are flows and metadata
            # whose category is not a key.
            bucket = get(e.cat)
            if bucket is not None:
                bucket.append(e)
        kept: dict[str, list[Event]] = {}
        for cat, kind in CAT_KIND.items():
            bucket = by_cat[cat]
            ph = kept_phase(kind)
            # The typed decoders' classes say the phase: when every event of the bucket has
            # it by its class (the usual case), no event needs looking at.
            if bucket and not set(map(type, bucket)) <= PHASE_TYPES[ph]:
                bucket = [e for e in bucket if e.ph == ph]
            kept.setdefault(kind, []).extend(bucket)
        cpu_ops = kept.pop("cpu_op")
        frames = kept.pop("python_function")
        decode_args_batch(cpu_ops + frames)  # (their External id)
        self.operators.extend(cpu_ops)
        self.operators.extend(frames)
        # Most events of a trace; only record_param_comms and old-style steps matter.  One
        # search of all the names tells whether any can be there; if so, one cheap test per
        # op (a prefix), then the exact ones on the few left.
        try:
            names = "\n".join(map(_NAME, cpu_ops))
            maybe_special = any(p in names for p in CPU_OP_PREFIXES)
        except TypeError:  # a name that is not text (loose decoders only)
            maybe_special = True
        special = ([e for e in cpu_ops if e.name.__class__ is str and e.name.startswith(CPU_OP_PREFIXES)]
                   if maybe_special else [])
        del cpu_ops
        kept["rpc"] = [e for e in special if e.name == "record_param_comms"]
        cpu_steps = [e for e in special if STEP_RE.match(e.name)]
        annotations = kept.pop("annotations")
        # user_annotation: steps (ProfilerStep#N, or marked by our exporter), record_param_comms
        # (some PyTorch versions), everything else a marker.
        for e, a in zip(annotations, decode_args_batch(annotations)):
            name = e.name
            if isinstance(a.ps, dict):
                if a.ps.get("step") is not None:
                    self.steps.append((int(a.ps["step"]), e))
                else:
                    self.markers.append(e)
            elif isinstance(name, str) and name.startswith("ProfilerStep#") and STEP_RE.match(name):
                self.steps.append((step_number(name[13:]), e))
            elif name == "record_param_comms":
                self.rpc.append(e)
            else:
                self.markers.append(e)
        self.steps.extend((step_number(e.name[13:]), e) for e in cpu_steps)
        for kind, evs in kept.items():
            if evs:
                decode_args_batch(evs, decoder=API_ARGS_LIST_DECODER if kind == "api" else ARGS_LIST_DECODER)
                getattr(self, kind).extend(evs)


# What :class:`Classified` can keep, for the native pre-filter (:mod:`.read`): the
# categories and their phase.  Every cpu_op is kept (the operators table), so no
# category is kept by name.
FILTER_RULES = prefilter.Rules(
    cats={cat: kept_phase(kind) for cat, kind in CAT_KIND.items()},
    by_name=None,
    prefixes=(),
)

