"""Optimizer steps: ``optimizer_step`` host spans and automatic step boundaries.

Uses torch's global optimizer hooks (``register_optimizer_step_pre_hook`` /
``register_optimizer_step_post_hook``), which fire around ``step()`` of every
``torch.optim.Optimizer``, so no code change is needed.  Each post-hook reports a step
boundary to ``on_step(end_ns)``.

With several optimizers (a GAN's generator and discriminator, or one per parameter
group) only the first optimizer that finishes a step marks boundaries, so one training
iteration is one step; all of them still get ``optimizer_step`` spans.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from perfscope.collectors.host.spans import OPTIMIZER_STEP, HostSpans

_time_ns = time.time_ns


class _State:
    def __init__(self) -> None:
        self.starts: dict[int, list[int]] = {}
        self.leader: int | None = None


def install(spans: HostSpans, on_step: Callable[[int], None] | None = None) -> Callable[[], None]:
    """Register the global optimizer hooks.

    Args:
        spans: where ``optimizer_step`` spans go (named after the optimizer's class).
        on_step: called with the end time (ns) of every step of the leading optimizer.

    Returns:
        a function that removes the hooks.

    Raises:
        ImportError: torch is not installed or too old to have global optimizer hooks.
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    state = _State()
    lock = threading.Lock()

    def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
        state.starts.setdefault(id(optimizer), []).append(_time_ns())

    def post(optimizer: Any, args: Any, kwargs: Any) -> None:
        end = _time_ns()
        stack = state.starts.get(id(optimizer))
        if stack:
            spans.add_span(stack.pop(), end, OPTIMIZER_STEP, type(optimizer).__name__)
        if on_step is None:
            return
        with lock:
            if state.leader is None:
                state.leader = id(optimizer)
            leads = state.leader == id(optimizer)
        if leads:
            on_step(end)

    handles = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]

    def remove() -> None:
        while handles:
            handles.pop().remove()

    return remove


__all__ = ["install"]
