"""Host time blocked in explicit CUDA synchronisation, as ``sync_wait`` host spans.

Covers ``torch.cuda.synchronize()``, ``torch.cuda.Stream.synchronize()`` and
``torch.cuda.Event.synchronize()``.  Implicit synchronisation (``Tensor.item()``,
``.cpu()``, ``.tolist()`` of CUDA tensors) is deliberately not patched: wrapping those
methods would cost every CPU tensor call and break torch.compile graphs, and CUPTI
already records them (a device-to-host copy in ``memcpy``, the wait in ``sync``).
"""
from __future__ import annotations

from collections.abc import Callable

from perfscope.collectors.host.patching import Patches, is_compiling
from perfscope.collectors.host.spans import SYNC_WAIT, HostSpans, timed


def install(spans: HostSpans) -> Callable[[], None]:
    """Patch torch.cuda's synchronize functions to record into ``spans``.

    Returns:
        a function that removes the patches.

    Raises:
        ImportError: torch is not installed.
    """
    import torch.cuda

    patches = Patches()
    compiling = is_compiling()
    patches.replace(torch.cuda, "synchronize", timed(torch.cuda.synchronize, spans, SYNC_WAIT, "torch.cuda.synchronize", compiling=compiling))
    for cls_name in ("Stream", "Event"):
        cls = getattr(torch.cuda, cls_name, None)
        if cls is not None and hasattr(cls, "synchronize"):
            patches.replace(cls, "synchronize", timed(cls.synchronize, spans, SYNC_WAIT, f"{cls_name}.synchronize", compiling=compiling))
    return patches.restore


__all__ = ["install"]
