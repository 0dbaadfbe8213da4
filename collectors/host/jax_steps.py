"""JAX steps: each ``jax.profiler.StepTraceAnnotation`` range becomes a ``steps`` row.

A JAX training loop marks its steps with ``with jax.profiler.StepTraceAnnotation("train",
step_num=i):``; that is a TraceMe, which records nothing unless JAX's own profiler runs.
:func:`install` wraps the annotation class of ``jax._src.profiler`` (where ``import jax``
defines it; perfscope never imports jax itself) so that each range also lands in a
:class:`JaxSteps` buffer as a step of source ``annotation``: its host range from entry to
exit, numbered by ``step_num`` (else by count), named ``<name>#<step>``.

It also wraps ``start_trace``: on this driver CUPTI serves one client per process, so
while perfscope records GPU activity JAX's profiler cannot subscribe (XLA logs
``CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`` and its trace has no GPU rows, while
perfscope's recording goes on); the recording then says so in a note.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from perfscope.collectors.host.patching import Patches
from perfscope.collectors.host.spans import _take

_time_ns = time.time_ns
SOURCE = "annotation"
TRACE_NOTE = (
    "jax.profiler.start_trace ran while perfscope records GPU activity: CUPTI serves one client per process on this "
    "driver, so JAX's trace holds no GPU activity (XLA logs CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); "
    "perfscope's recording is complete. Use one of the two at a time (`perfscope record --no-cupti` leaves CUPTI to JAX)"
)


class JaxSteps:
    """Buffer of ``steps`` rows from StepTraceAnnotation ranges.

    Args:
        on: returns False while nothing may be recorded (outside the schedule's window,
            after stop, in a forked child).
    """

    def __init__(self, on: Callable[[], bool] = lambda: True) -> None:
        self.on = on
        self._rows: list[tuple[int, int, int, str, str]] = []
        self._named: dict[int, tuple[str, Any]] = {}  # id(annotation) -> (name, step_num) until entered
        self._local = threading.local()
        self._count = 0

    def named(self, obj: object, name: Any, step_num: Any) -> None:
        """An annotation was created (its name and ``step_num`` are known only here)."""
        if len(self._named) > 1024:  # annotations made but never entered: forget them
            self._named.clear()
        self._named[id(obj)] = (str(name), step_num)

    def entered(self, obj: object) -> None:
        """An annotation's range begins now."""
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        name, step_num = self._named.pop(id(obj), ("step", None))
        stack.append((id(obj), _time_ns(), name, step_num))

    def exited(self, obj: object) -> None:
        """An annotation's range ends now: one step row (when recording)."""
        end = _time_ns()
        stack = getattr(self._local, "stack", None)
        if not stack or stack[-1][0] != id(obj):
            return  # entered before the hook was installed
        _, start, name, step_num = stack.pop()
        step = step_num if isinstance(step_num, int) and not isinstance(step_num, bool) else self._count
        self._count = step + 1
        if self.on():
            self._rows.append((step, start, end - start, f"{name}#{step}", SOURCE))

    def drain(self) -> dict[str, list[Any]] | None:
        """Remove the buffered rows and return them as ``steps`` columns (None if none)."""
        rows = _take(self._rows)
        if not rows:
            return None
        step, start, dur, name, source = (list(c) for c in zip(*rows))
        return {"step": step, "start_ns": start, "dur_ns": dur, "name": name, "source": source}


def install(module: ModuleType, steps: JaxSteps, note: Callable[[str], None],
            cupti_recording: Callable[[], bool]) -> Callable[[], None]:
    """Wrap ``module.StepTraceAnnotation`` and ``module.start_trace`` (``module`` is
    ``jax._src.profiler``, or anything shaped like it).

    Args:
        steps: where the step rows go.
        note: reports the start_trace conflict (once).
        cupti_recording: True while perfscope's CUPTI collector records in this process.

    Returns:
        a function that removes the wrappers.
    """
    patches = Patches()
    cls = getattr(module, "StepTraceAnnotation", None)
    if isinstance(cls, type):
        init, enter, exit_ = (getattr(cls, attr) for attr in ("__init__", "__enter__", "__exit__"))

        def init_(self: Any, name: str, *args: Any, **kwargs: Any) -> None:
            steps.named(self, name, kwargs.get("step_num"))
            init(self, name, *args, **kwargs)

        def enter_(self: Any) -> Any:
            steps.entered(self)
            return enter(self)

        def exit__(self: Any, *exc: Any) -> Any:
            try:
                return exit_(self, *exc)
            finally:
                steps.exited(self)

        for attr, fn in (("__init__", init_), ("__enter__", enter_), ("__exit__", exit__)):
            patches.replace(cls, attr, fn)
    start_trace = getattr(module, "start_trace", None)
    if callable(start_trace):
        def traced(*args: Any, **kwargs: Any) -> Any:
            if cupti_recording():
                note(TRACE_NOTE)
            return start_trace(*args, **kwargs)

        patches.replace(module, "start_trace", traced)
    return patches.restore


__all__ = ["JaxSteps", "install", "SOURCE", "TRACE_NOTE"]
