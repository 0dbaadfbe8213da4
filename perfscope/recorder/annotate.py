"""``perfscope.annotate``: named ranges as NVTX ranges and ``markers`` rows."""
from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from perfscope.errors import UsageError
from perfscope.recorder import state

F = TypeVar("F", bound=Callable[..., Any])
_time_ns = time.time_ns
_nvtx_resolved = False
_nvtx_push: Callable[[str], Any] | None = None
_nvtx_pop: Callable[[], Any] | None = None


def _resolve_nvtx() -> None:
    """Pick the NVTX backend once: the nvtx package, else torch.cuda.nvtx, else none."""
    global _nvtx_resolved, _nvtx_push, _nvtx_pop
    try:
        import nvtx

        domain = nvtx.get_domain("perfscope")
        attrs: dict[str, Any] = {}

        def push(name: str) -> None:
            a = attrs.get(name)
            if a is None:
                a = domain.get_event_attributes(message=name)
                if len(attrs) < 10_000:  # names are few; never let the cache grow without bound
                    attrs[name] = a
            domain.push_range(a)

        _nvtx_push, _nvtx_pop = push, domain.pop_range
        _nvtx_resolved = True
        return
    except Exception:  # noqa: BLE001 - no nvtx package: try torch's
        pass
    torch = sys.modules.get("torch")
    if torch is None:
        return  # torch may come later; resolve again next time
    try:
        if hasattr(torch._C, "_nvtx"):
            _nvtx_push, _nvtx_pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    except Exception:  # noqa: BLE001
        pass
    _nvtx_resolved = True


class _Annotation:
    """A named range: context manager and decorator (see :func:`annotate`)."""

    __slots__ = ("name", "_starts")

    def __init__(self, name: str) -> None:
        self.name = name
        self._starts: list[int] = []

    def __enter__(self) -> _Annotation:
        if not _nvtx_resolved:
            _resolve_nvtx()
        if _nvtx_push is not None:
            _nvtx_push(self.name)
        self._starts.append(_time_ns())
        return self

    def __exit__(self, *exc: object) -> None:
        end = _time_ns()
        start = self._starts.pop() if self._starts else end
        if _nvtx_pop is not None:
            _nvtx_pop()
        p = state.ACTIVE
        if p is not None and p._markers is not None:
            p._markers.add_span(start, end, self.name)

    def __call__(self, func: F) -> F:
        name = self.name

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _nvtx_resolved:
                _resolve_nvtx()
            if _nvtx_push is not None:
                _nvtx_push(name)
            start = _time_ns()
            try:
                return func(*args, **kwargs)
            finally:
                end = _time_ns()
                if _nvtx_pop is not None:
                    _nvtx_pop()
                p = state.ACTIVE
                if p is not None and p._markers is not None:
                    p._markers.add_span(start, end, name)

        return wrapper  # type: ignore[return-value]


def annotate(name: str | Callable[..., Any]) -> Any:
    """Mark a named range: an NVTX range (domain ``perfscope``) and a ``markers`` row.

    Use as ``with perfscope.annotate("forward"): ...`` or ``@perfscope.annotate("forward")``
    (bare ``@perfscope.annotate`` names the range after the function).  Works with or
    without a running profiler (then it is only an NVTX range, visible to Nsight).

    Returns:
        a context manager/decorator; the decorated function when used bare.
    """
    if type(name) is str:  # the common case first: annotate sits on hot paths
        return _Annotation(name)
    if callable(name):
        return _Annotation(getattr(name, "__qualname__", getattr(name, "__name__", "function")))(name)
    if not isinstance(name, str):
        raise UsageError(f"annotate() takes the range's name as a str, not {type(name).__name__}")
    return _Annotation(name)


__all__ = ["annotate"]
