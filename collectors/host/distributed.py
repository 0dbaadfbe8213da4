"""``torch.distributed`` barriers and collectives as host spans.

Every function below is wrapped in the ``torch.distributed`` namespace (the one user code
calls through ``dist.all_reduce(...)``) and restored on stop.  ``barrier`` and
``monitored_barrier`` become spans of kind ``barrier``; the rest ``collective_wait``,
named after the function (``all_reduce``, or ``all_reduce(async)`` with
``async_op=True``, where the span is only the time to enqueue).

What this cannot see: collectives issued from C++ (DDP's gradient all-reduce, bucketed
in the reducer) and the later ``Work.wait()`` of async calls; the NCCL profiler plugin
records those on the GPU side.  Under ``perfscope record`` the hooks attach right after
``import torch`` completes, so even ``from torch.distributed import all_reduce`` binds the
wrapper; with ``perfscope.profile()`` a name bound before ``start()`` keeps the original.
"""
from __future__ import annotations

from collections.abc import Callable

from perfscope.collectors.host.patching import Patches, is_compiling
from perfscope.collectors.host.spans import BARRIER, COLLECTIVE_WAIT, HostSpans, timed

BARRIERS = ("barrier", "monitored_barrier")
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "reduce_scatter", "reduce_scatter_tensor", "broadcast", "broadcast_object_list",
    "reduce", "all_to_all", "all_to_all_single", "gather", "gather_object",
    "scatter", "scatter_object_list", "send", "recv", "batch_isend_irecv",
)


def install(spans: HostSpans) -> Callable[[], None]:
    """Wrap torch.distributed's barriers and collectives to record into ``spans``.

    Returns:
        a function that restores the original functions (nothing to do when
        torch.distributed is not available in this build).

    Raises:
        ImportError: torch is not installed.
    """
    import torch.distributed as dist

    patches = Patches()
    if not dist.is_available():
        return patches.restore
    compiling = is_compiling()
    for names, kind in ((BARRIERS, BARRIER), (COLLECTIVES, COLLECTIVE_WAIT)):
        for name in names:
            fn = getattr(dist, name, None)
            if callable(fn):
                patches.replace(dist, name, timed(fn, spans, kind, name, compiling=compiling, async_name=f"{name}(async)"))
    return patches.restore


__all__ = ["install", "BARRIERS", "COLLECTIVES"]
