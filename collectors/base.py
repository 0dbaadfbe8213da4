"""The one interface between the recorder and the collectors.

A collector captures one kind of event into the store.  The recorder (``perfscope.profile``,
the process side of ``perfscope record`` and the ``record`` launcher) knows no collector by
name: it walks :data:`perfscope.collectors.registry.REGISTRY`, creates the collectors the
record options turn on, and drives each through :class:`Collector`::

    collector = spec.create()            # a fresh object; importing it must not need a GPU
    if collector.start(ctx):             # False: it cannot run here and said why (ctx.note)
        ...
        collector.flush()                # every flush interval, and before an emergency exit
        ...
        stats = collector.stop()         # idempotent counters for the rank metadata

When a collector starts depends on its :data:`Phase`:

* ``job``: around the job's processes (environment set-up before they start, conversion
  after they end): run by ``perfscope record``'s launcher, or by an in-process
  ``perfscope.profile`` for its own process (the NCCL profiler plugin);
* ``process``: for the whole life of a recording process (host hooks);
* ``window``: while the schedule's recording window is open (CUPTI, NVML).  A window
  collector whose registry line says ``pausable`` also implements ``pause()`` and
  ``resume()``: it starts with the recording, is paused between windows (it must then cost
  the training loop nothing: CUPTI disables its activity kinds and callbacks) and resumed
  when the next window's warm-up begins, so opening a window costs no start-up.  Other
  window collectors are started when a window opens and stopped when it closes.

A collector never imports the recorder (``perfscope.profiler``, ``perfscope.launch``,
``perfscope.options``, ``perfscope.recorder``): what it needs arrives in the
:class:`CollectorContext`.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

Phase = Literal["job", "process", "window"]
PHASES: tuple[Phase, ...] = ("job", "process", "window")


class Writer(Protocol):
    """What collectors need of a :class:`perfscope.store.RankWriter`: one table batch at a time."""

    def append(self, table_name: str, data: Any) -> None: ...


@dataclass(frozen=True)
class CollectorOptions:
    """The settings collectors read, resolved once by :mod:`perfscope.options`.

    Attributes:
        flush_interval_s: longest time recorded data stays in memory.
        cupti_api_source: where CUPTI API records come from (``callback``/``activity``;
            None: the collector's default).
        cupti_sink_library: a native CUPTI sink library to load instead of the built one.
        cupti_decode: where CUPTI records are decoded: None (default) or ``process``, in
            another process (the sink writes segment files); ``inprocess``, by the
            training process itself at each flush.
        cupti_detach: finalize CUPTI between a schedule's windows and at stop
            (on by default; ``PERFSCOPE_CUPTI_DETACH=0`` turns it off; see
            :class:`~perfscope.collectors.cupti.CuptiCollector`).
        cupti_uvm: when to arm CUPTI's Unified Memory counters (``PERFSCOPE_CUPTI_UVM``:
            ``auto``, the default, at the job's first managed allocation; ``always``; ``off``).
        nvml_interval_s: seconds between NVML samples.
    """

    flush_interval_s: float = 2.0
    cupti_api_source: str | None = None
    cupti_sink_library: str | None = None
    cupti_decode: str | None = None
    cupti_detach: bool = True
    cupti_uvm: str | None = None
    nvml_interval_s: float = 0.1


@dataclass
class CollectorContext:
    """What the recorder hands a collector at :meth:`Collector.start`.

    Attributes:
        run_path: the run directory (absolute).
        rank: this process's rank; None in the ``record`` launcher, which acts for every rank.
        options: the collector settings.
        note: report a problem once (rank metadata and a Python warning in-process; the
            launcher prints its notes at the end).  Collectors that cannot run say why here.
        env: the environment the job's processes see: ``os.environ`` in a recording
            process, the child environment in the launcher.  ``job`` collectors may set
            variables in it (and restore them at stop).
        writer: this rank's table writer (None in the launcher).
        host_spans: the ``host`` table buffer (a :class:`perfscope.collectors.host.spans.HostSpans`),
            switched off by the recorder outside the schedule's window.
        on_step: call with the end time (ns) of an automatic step boundary (optimizer step).
        recording: returns False once recording has stopped or in a forked child.
        facts: rank facts a collector establishes while it runs (``clock_offset_ns``),
            written into the rank metadata by the recorder.
    """

    run_path: Path
    rank: int | None
    options: CollectorOptions
    note: Callable[[str], None]
    env: MutableMapping[str, str]
    writer: Writer | None = None
    host_spans: Any = None
    on_step: Callable[[int], None] | None = None
    recording: Callable[[], bool] = lambda: True
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class CollectorStats:
    """What a collector reports when it stops.

    Attributes:
        dropped: records lost per source (added to the rank's ``dropped_events``).
        details: entries for the rank's ``collector_stats`` (the launcher, which writes
            after the ranks have exited, puts them at the top of each rank file).
        by_rank: in the launcher (``ctx.rank`` None), the stats of each rank.
    """

    dropped: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    by_rank: dict[int, CollectorStats] = field(default_factory=dict)


class Collector(Protocol):
    """One source of events, driven by the recorder (see the module docstring)."""

    def start(self, ctx: CollectorContext) -> bool:
        """Start capturing; return False (after ``ctx.note(why)`` when the user should know)
        when the collector cannot run here.  Raises only on bugs: the recorder turns any
        exception into a note and records without this collector."""
        ...

    def flush(self) -> None:
        """Hand what was captured so far to ``ctx.writer`` (thread-safe, may be a no-op)."""
        ...

    def stop(self) -> CollectorStats:
        """Stop capturing, undo every change made at start, and return the counters."""
        ...


class Pausable(Collector, Protocol):
    """A ``window`` collector that can stop capturing between windows without stopping."""

    def pause(self) -> None:
        """Stop capturing until :meth:`resume` (on the training thread, at a step boundary:
        cheap, and nothing captured so far is lost)."""
        ...

    def resume(self) -> None:
        """Capture again."""
        ...


@dataclass(frozen=True)
class CollectorSpec:
    """One registry line: how to make a collector and when it runs.

    Attributes:
        name: the collector's name in the rank metadata's ``collectors``.
        factory: ``"module:callable"`` returning a new :class:`Collector`; imported only
            when the record options ask for the collector.
        phase: when it runs (see :data:`Phase`).
        option: the boolean field of :class:`perfscope.options.RecordOptions` that turns
            it on (a keyword of ``perfscope.profile``, a ``--no-...`` flag of ``record``).
        pausable: a ``window`` collector with ``pause()``/``resume()`` (see the module
            docstring).
    """

    name: str
    factory: str
    phase: Phase
    option: str
    pausable: bool = False

    def create(self) -> Collector:
        """Import the factory and return a new collector.

        Raises:
            ImportError, AttributeError: the collector's module is missing or broken.
        """
        module, _, attr = self.factory.partition(":")
        made: Collector = getattr(importlib.import_module(module), attr)()
        return made


def dropped_count(stats: Any) -> int:
    """Sum the dropped-record counters (keys containing ``drop``) of a collector's stats dict."""
    if not isinstance(stats, dict):
        return 0
    total = 0
    for k, v in stats.items():
        if "drop" not in str(k).lower() or isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            total += int(v)
        elif isinstance(v, dict):
            total += sum(int(x) for x in v.values() if isinstance(x, (int, float)) and not isinstance(x, bool))
    return total


__all__ = [
    "Collector", "CollectorContext", "CollectorOptions", "CollectorSpec", "CollectorStats", "Pausable", "Phase", "PHASES",
    "Writer", "dropped_count",
]
