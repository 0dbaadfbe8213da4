"""The host-hooks collector: DataLoader waits, torch.distributed calls, optimizer steps, syncs.

The hooks go in once torch is imported (now, or later from inside the importing
statement) and write ``host`` rows into the recorder's span buffer; optimizer steps also
become automatic step boundaries through ``ctx.on_step``.
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from perfscope.collectors.base import CollectorContext, CollectorStats


class HostHooks:
    """Installs the torch host hooks for one recording process (see the module docstring)."""

    def __init__(self) -> None:
        self._ctx: CollectorContext | None = None
        self._undo: list[tuple[str, Callable[[], object]]] = []

    def start(self, ctx: CollectorContext) -> bool:
        """Hook torch as soon as it is imported; always True (no torch yet is no failure)."""
        from perfscope.collectors.host.patching import when_imported

        self._ctx = ctx
        self._undo.append(("torch import hook", when_imported("torch", self._install)))
        return True

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
        """Nothing to do: the recorder drains the span buffer."""

    def stop(self) -> CollectorStats:
        """Remove every hook, newest first.

        Raises:
            RuntimeError: a hook could not be removed (the others are removed regardless).
        """
        errors: list[str] = []
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


__all__ = ["HostHooks"]
