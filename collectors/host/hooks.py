"""The host-hooks collector: DataLoader waits, torch.distributed calls, optimizer steps, syncs,
and JAX's step annotations.

The torch hooks go in once torch is imported (now, or later from inside the importing
statement) and write ``host`` rows into the recorder's span buffer; optimizer steps also
become automatic step boundaries through ``ctx.on_step``.  The JAX hooks go in once
``jax._src.profiler`` is imported (by ``import jax``) and turn each
``jax.profiler.StepTraceAnnotation`` range into a ``steps`` row
(:mod:`~perfscope.collectors.host.jax_steps`).  Neither library is imported by perfscope.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

from perfscope.collectors.base import CollectorContext, CollectorStats
from perfscope.collectors.host.jax_steps import JaxSteps

JAX_PROFILER = "jax._src.profiler"


class HostHooks:
    """Installs the torch and JAX host hooks for one recording process (see the module docstring)."""

    def __init__(self) -> None:
        self._ctx: CollectorContext | None = None
        self._undo: list[tuple[str, Callable[[], object]]] = []
        self._jax = JaxSteps(self._recording)

    def start(self, ctx: CollectorContext) -> bool:
        """Hook torch and JAX as soon as they are imported; always True (neither yet is no failure)."""
        from perfscope.collectors.host.patching import when_imported

        self._ctx = ctx
        self._undo.append(("torch import hook", when_imported("torch", self._install)))
        self._undo.append(("jax import hook", when_imported(JAX_PROFILER, self._install_jax)))
        return True

    def _recording(self) -> bool:
        ctx = self._ctx
        spans = ctx.host_spans if ctx is not None else None
        return ctx is not None and ctx.recording() and (spans is None or bool(spans.on))

    def _install_jax(self, module: ModuleType) -> None:
        """Wrap JAX's step annotation and start_trace (called once jax is imported; never raises)."""
        ctx = self._ctx
        if ctx is None or not ctx.recording():
            return
        from perfscope.collectors.host import jax_steps

        try:
            self._undo.append(("jax hooks", jax_steps.install(module, self._jax, ctx.note, _cupti_recording)))
        except Exception as e:  # noqa: BLE001 - a jax version we do not know: record without its steps
            ctx.note(f"could not hook jax.profiler.StepTraceAnnotation ({type(e).__name__}: {e}); JAX steps are not marked")

    def _install(self, _torch: ModuleType) -> None:
        """Attach the torch hooks (called once torch is imported; must never raise)."""
        ctx = self._ctx
        if ctx is None or not ctx.recording():
            return
        from perfscope.collectors.host import dataloader, distributed, optimizer, sync

        spans = ctx.host_spans
        for name, install in (
            ("dataloader", lambda: dataloader.install(spans)),
            ("distributed", lambda: distributed.install(spans)),
            ("optimizer", lambda: optimizer.install(spans, ctx.on_step)),
            ("sync", lambda: sync.install(spans)),
        ):
            try:
                self._undo.append((f"{name} hooks", install()))
            except Exception as e:  # noqa: BLE001 - a torch version we do not know: keep the rest
                ctx.note(f"could not hook torch {name} ({type(e).__name__}: {e}); those host spans are missing")

    def flush(self) -> None:
        """Write the JAX steps seen so far (the recorder drains the span buffer itself)."""
        data = self._jax.drain()
        if data and self._ctx is not None and self._ctx.writer is not None:
            self._ctx.writer.append("steps", data)

    def stop(self) -> CollectorStats:
        """Write the last JAX steps, then remove every hook, newest first.

        Raises:
            RuntimeError: a hook could not be removed (the others are removed regardless).
        """
        errors: list[str] = []
        try:
            self.flush()
        except Exception as e:  # noqa: BLE001
            errors.append(f"writing JAX steps failed: {type(e).__name__}: {e}")
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except Exception as e:  # noqa: BLE001
                errors.append(f"removing {what} failed: {type(e).__name__}: {e}")
        self._ctx = None
        if errors:
            raise RuntimeError("; ".join(errors))
        return CollectorStats()


def _cupti_recording() -> bool:
    """True while perfscope's CUPTI collector records in this process (without importing it)."""
    collector = sys.modules.get("perfscope.collectors.cupti.collector")
    return bool(collector is not None and collector.recording())


__all__ = ["HostHooks"]
