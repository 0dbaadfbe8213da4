"""Host time blocked in explicit CUDA synchronisation, as ``sync_wait`` host spans.

Covers ``torch.cuda.synchronize()``, ``torch.cuda.Stream.synchronize()`` and
``torch.cuda.Event.synchronize()``.  Implicit synchronisation (``Tensor.item()``,
``.cpu()``, ``.tolist()`` of CUDA tensors) is deliberately not patched: wrapping those
methods would cost every CPU tensor call and break torch.compile graphs, and CUPTI
already records them (a device-to-host copy in ``memcpy``, the wait in ``sync``).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from perfscope.collectors.host.patching import Patches, is_compiling
from perfscope.collectors.host.spans import SYNC_WAIT, HostSpans

_time_ns = time.time_ns


def _timed(fn: Callable[..., Any], spans: HostSpans, name: str, compiling: Callable[[], bool]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not spans.on or compiling():
            return fn(*args, **kwargs)
        t0 = _time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            spans.add(t0, SYNC_WAIT, name)

    wrapper.__name__ = getattr(fn, "__name__", name)
    wrapper.__qualname__ = getattr(fn, "__qualname__", name)
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


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
    patches.replace(torch.cuda, "synchronize", _timed(torch.cuda.synchronize, spans, "torch.cuda.synchronize", compiling))
    for cls_name in ("Stream", "Event"):
        cls = getattr(torch.cuda, cls_name, None)
        if cls is not None and hasattr(cls, "synchronize"):
            patches.replace(cls, "synchronize", _timed(cls.synchronize, spans, f"{cls_name}.synchronize", compiling))
    return patches.restore


__all__ = ["install"]
