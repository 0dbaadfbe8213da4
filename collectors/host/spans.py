"""In-memory buffers for host spans and markers, drained in bulk into the store.

The hooks run on the training thread, so recording one span is a single ``list.append``
of a tuple (a few hundred nanoseconds with the two clock reads); turning rows into Arrow
columns happens on the flusher thread, in bulk.  ``drain`` takes rows with a slice and a
slice deletion, each atomic under the GIL, so a span appended while a drain runs is
never lost: it simply waits for the next drain.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

_time_ns = time.time_ns
_tid = threading.get_native_id

# Host span kinds the store's ``host`` table knows (schema.HOST.kind).
DATALOADER_WAIT = "dataloader_wait"
BARRIER = "barrier"
COLLECTIVE_WAIT = "collective_wait"
OPTIMIZER_STEP = "optimizer_step"
SYNC_WAIT = "sync_wait"


class HostSpans:
    """Buffer of ``host`` table rows: (start_ns, dur_ns, tid, kind, name).

    Attributes:
        on: when false, :meth:`add` records nothing (outside a schedule's window, after
            stop, in a forked child).
    """

    def __init__(self) -> None:
        self.on = True
        self._rows: list[tuple[int, int, int, str, str]] = []

    def add(self, start_ns: int, kind: str, name: str) -> None:
        """Record a span that began at ``start_ns`` (time.time_ns()) and ends now."""
        if self.on:
            self._rows.append((start_ns, _time_ns() - start_ns, _tid(), kind, name))

    def add_span(self, start_ns: int, end_ns: int, kind: str, name: str) -> None:
        """Record a span with both ends known."""
        if self.on:
            self._rows.append((start_ns, end_ns - start_ns, _tid(), kind, name))

    def __len__(self) -> int:
        return len(self._rows)

    def drain(self) -> dict[str, list[Any]] | None:
        """Remove the buffered rows and return them as ``host`` table columns (None if none)."""
        rows = _take(self._rows)
        if not rows:
            return None
        start, dur, tid, kind, name = (list(c) for c in zip(*rows))
        return {"start_ns": start, "dur_ns": dur, "tid": tid, "kind": kind, "name": name}

    def clear(self) -> None:
        """Drop everything buffered (a forked child must not write its parent's rows)."""
        _take(self._rows)


def timed(fn: Callable[..., Any], spans: HostSpans, kind: str, name: str, *,
          compiling: Callable[[], bool] | None = None, async_name: str | None = None) -> Callable[..., Any]:
    """Wrap ``fn`` so that each call is recorded into ``spans`` as a span of ``kind``.

    The span is named ``name``, or ``async_name`` when the call passes ``async_op=True``.
    While ``spans`` is off, or ``compiling()`` says torch.compile is tracing (dynamo must see
    the real function), ``fn`` is called directly.

    Returns:
        the wrapper, carrying ``fn``'s name, qualified name, docstring and module, and
        ``__wrapped__``.
    """

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not spans.on or (compiling is not None and compiling()):
            return fn(*args, **kwargs)
        t0 = _time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            spans.add(t0, kind, async_name if async_name is not None and kwargs.get("async_op") else name)

    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(wrapper, attr, getattr(fn, attr))
        except (AttributeError, TypeError):
            pass
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


class Markers:
    """Buffer of ``markers`` table rows written by ``perfscope.annotate`` (source perfscope)."""

    def __init__(self, pid: int) -> None:
        self.on = True
        self.pid = pid
        self._rows: list[tuple[int, int, int, str]] = []

    def add_span(self, start_ns: int, end_ns: int, name: str) -> None:
        """Record an annotated range of the calling thread."""
        if self.on:
            self._rows.append((start_ns, end_ns - start_ns, _tid(), name))

    def drain(self) -> dict[str, list[Any]] | None:
        """Remove the buffered rows and return them as ``markers`` table columns (None if none)."""
        rows = _take(self._rows)
        if not rows:
            return None
        start, dur, tid, name = (list(c) for c in zip(*rows))
        n = len(start)
        return {
            "start_ns": start, "dur_ns": dur, "pid": [self.pid] * n, "tid": tid, "name": name,
            "domain": ["perfscope"] * n, "source": ["perfscope"] * n,
        }

    def clear(self) -> None:
        """Drop everything buffered."""
        _take(self._rows)


def _take(rows: list[Any]) -> list[Any]:
    n = len(rows)
    if not n:
        return []
    taken = rows[:n]
    del rows[:n]
    return taken


__all__ = [
    "HostSpans", "Markers",
    "DATALOADER_WAIT", "BARRIER", "COLLECTIVE_WAIT", "OPTIMIZER_STEP", "SYNC_WAIT",
]
