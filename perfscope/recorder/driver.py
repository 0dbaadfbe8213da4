"""Drive the registered collectors through their protocol, knowing none of them by name."""
from __future__ import annotations

from collections.abc import Iterable

from perfscope.collectors.base import Collector, CollectorContext, CollectorSpec, CollectorStats, Phase
from perfscope.collectors import registry
from perfscope.options import RecordOptions


class CollectorSet:
    """The registered collectors the record options turn on, started and stopped by phase.

    Attributes:
        ctx: the context every collector gets.
        names: the collectors that started, in start order.
        dropped: records lost per source, summed over the collectors that stopped.
        details: the collectors' statistics (``collector_stats`` of the rank metadata).
        by_rank: in the launcher, each rank's statistics.
    """

    def __init__(self, options: RecordOptions, ctx: CollectorContext) -> None:
        self.ctx = ctx
        self._specs = [spec for spec in registry.REGISTRY if options.enabled(spec.option)]
        self._running: list[tuple[CollectorSpec, Collector]] = []
        self._started_phases: set[Phase] = set()
        self._refused: set[str] = set()
        self.names: list[str] = []
        self.dropped: dict[str, int] = {}
        self.details: dict[str, object] = {}
        self.by_rank: dict[int, CollectorStats] = {}

    def start(self, phases: Iterable[Phase], *, pausable_only: bool = False) -> None:
        """Start the collectors of ``phases`` (once per phase; ``window`` collectors again
        after :meth:`close_window` stopped them), in registry order; with ``pausable_only``
        only the pausable window collectors.

        A collector that cannot be loaded, refuses to start or fails to start is left out
        with a note (and not tried again); recording goes on.
        """
        wanted = set(phases) - (self._started_phases - {"window"})
        self._started_phases |= wanted
        running = {spec.name for spec, _ in self._running}
        for spec in self._specs:
            if spec.phase not in wanted or spec.name in running or spec.name in self._refused:
                continue
            if pausable_only and not spec.pausable:
                continue
            try:
                collector = spec.create()
            except Exception as e:  # noqa: BLE001 - a broken optional collector must not stop recording
                self.ctx.note(f"the {spec.name} collector cannot be loaded ({type(e).__name__}: {e}); recording goes on without it")
                self._refused.add(spec.name)
                continue
            try:
                ok = collector.start(self.ctx)
            except Exception as e:  # noqa: BLE001
                self.ctx.note(f"the {spec.name} collector failed to start ({type(e).__name__}: {e}); recording goes on without it")
                ok = False
            if ok:
                self._running.append((spec, collector))
                if spec.name not in self.names:
                    self.names.append(spec.name)
            else:
                self._refused.add(spec.name)

    def open_window(self) -> None:
        """A window (its warm-up) begins: resume the paused window collectors, start the others."""
        for spec, collector in list(self._running):
            if spec.phase == "window" and spec.pausable:
                try:
                    collector.resume()  # type: ignore[attr-defined]
                except Exception as e:  # noqa: BLE001
                    self.ctx.note(f"the {spec.name} collector failed to resume ({type(e).__name__}: {e})")
        self.start(("window",))

    def close_window(self) -> list[str]:
        """A window ended: pause the pausable window collectors, newest first, stop the others.

        Newest first, as :meth:`stop` goes: the samplers that run on their own threads (NVML)
        come after CUPTI in the registry and pause at once, while CUPTI's detach (a device
        synchronise, a flush and ``cuptiFinalize``) may take a while; paused after it, the
        sampler would record the paused job for that while.

        Returns:
            what failed to stop.
        """
        for spec, collector in reversed(list(self._running)):
            if spec.phase == "window" and spec.pausable:
                try:
                    collector.pause()  # type: ignore[attr-defined]
                except Exception as e:  # noqa: BLE001
                    self.ctx.note(f"the {spec.name} collector failed to pause ({type(e).__name__}: {e})")
        return self.stop(("window",), pausable=False)

    def flush(self) -> None:
        """Flush every running collector (a failure becomes a note)."""
        for spec, collector in list(self._running):
            try:
                collector.flush()
            except Exception as e:  # noqa: BLE001
                self.ctx.note(f"the {spec.name} collector's flush failed ({type(e).__name__}: {e})")

    def stop(self, phases: Iterable[Phase], *, pausable: bool = True) -> list[str]:
        """Stop the running collectors of ``phases`` (with ``pausable`` false, not the
        pausable ones), newest first, and keep their statistics.

        Returns:
            what failed to stop (the other collectors are stopped regardless).
        """
        wanted = set(phases)
        errors: list[str] = []
        for spec, collector in reversed(list(self._running)):
            if spec.phase not in wanted or (spec.pausable and not pausable):
                continue
            self._running.remove((spec, collector))
            try:
                self._merge(collector.stop())
            except Exception as e:  # noqa: BLE001
                errors.append(f"stopping the {spec.name} collector failed: {type(e).__name__}: {e}")
        return errors

    def forget(self) -> None:
        """In a forked child: drop every collector without stopping it (the parent owns them)."""
        self._running.clear()

    def _merge(self, stats: CollectorStats) -> None:
        _add_dropped(self.dropped, stats.dropped)
        self.details.update(stats.details)
        for rank, theirs in stats.by_rank.items():
            mine = self.by_rank.setdefault(rank, CollectorStats())
            _add_dropped(mine.dropped, theirs.dropped)
            mine.details.update(theirs.details)


def _add_dropped(into: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + int(v)


__all__ = ["CollectorSet"]
