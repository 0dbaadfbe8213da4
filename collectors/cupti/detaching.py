"""Letting go of CUPTI between a schedule's windows, and attaching again: the detaching half
of :class:`~perfscope.collectors.cupti.collector.CuptiCollector`.

CUPTI disabled but attached keeps costing the launching thread most of what it costs
recording (on the H200 the transformer step of ``benchmarks/pause_cost.py``: 1.2-1.4x
recording, 1.20-1.30x paused or stopped), because CUPTI stays hooked into the driver until
``cuptiFinalize``.  Detached it cost 0.94-1.06x (9 of 10 blocks; one 1.19x).  A detach
(synchronise, forced flush, the subscriber slot given back, ``cuptiFinalize``) took 17-20 ms
and attaching again 11 ms; with the Unified Memory counters armed the detach took 2.0 s
(their teardown, in ``cuptiActivityDisable`` or in ``cuptiFinalize``), so then the collector
stays attached.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from perfscope.collectors.cupti import attach, probe

if TYPE_CHECKING:
    from perfscope.collectors.cupti import uvm
    from perfscope.collectors.cupti.native import Sink


class Detaching:
    """The collector's detach and re-attach steps; :class:`CuptiCollector` provides the
    state they use (the sink, the subscriptions, the Unified Memory counters, the lock)."""

    _sink: Sink | None
    _subscriber: Any
    _native_subscriber: bool
    _api_from_callback: bool
    _uvm: uvm.UvmCounters | None
    _lock: threading.Lock
    _enabled: list[int]
    _detached: bool
    _paused: bool
    _drain_paused: bool
    _stats_clock: probe.ClockCheck | None
    _detach_ns: int
    _attach_ns: int
    detaches: int
    warnings: list[str]

    if TYPE_CHECKING:
        def _warn_once(self, msg: str) -> None: ...
        @staticmethod
        def _clock_now(cupti: Any) -> probe.ClockCheck | None: ...
        def _attach(self, cupti: Any, sink: Sink) -> None: ...

    def _may_detach(self) -> bool:
        """Whether perfscope alone uses CUPTI here: it holds the subscriber slot and no
        torch.profiler records (``cuptiFinalize`` would end another client's session); and
        whether a detach is cheap: not with the Unified Memory counters armed (2 s)."""
        held = self._native_subscriber or self._subscriber is not None
        uvm_armed = self._uvm is not None and self._uvm.enabled
        return held and self._sink is not None and not uvm_armed and not probe.torch_profiler_active()

    def _let_go(self, cupti: Any) -> None:
        """Finalize CUPTI once its records are in the sink (the caller disabled the kinds).

        The GPU is synchronised first so that the kernels still running finish and their
        records are flushed, not lost with CUPTI's buffers."""
        assert self._sink is not None
        t0 = time.perf_counter_ns()
        with self._lock:
            attach.sync_current_context()
            self._sink.flush(forced=True)
            self._stats_clock = self._clock_now(cupti)  # the last CUPTI call before the finalize
            self._sink.set_detached(True)  # from here no thread of the sink calls CUPTI
            self._drop_subscription(cupti)
            try:
                cupti.finalize()
            except Exception as e:  # noqa: BLE001 - CUPTI stays attached and merely disabled
                self._warn_once(f"cuptiFinalize failed ({e}); between windows CUPTI stays attached (disabled)")
                self._sink.set_detached(False)
                self._resubscribe(cupti, self._sink)
                return
            self._detached = True
            self._drain_paused = False  # the forced flush above handed everything over
            self.detaches += 1
        self._detach_ns += time.perf_counter_ns() - t0

    def _reattach(self, cupti: Any) -> None:
        """Attach CUPTI again after :meth:`_let_go`: subscribe, register and enable as
        :meth:`start` did (same sink, same segment files, same clock)."""
        assert self._sink is not None
        t0 = time.perf_counter_ns()
        with self._lock:
            self._sink.set_detached(False)
            self._resubscribe(cupti, self._sink)
            self._attach(cupti, self._sink)
            self._detached = False
            self._paused = False
        self._attach_ns += time.perf_counter_ns() - t0

    def _drop_subscription(self, cupti: Any) -> None:
        """Stop the UVM counters (kept for their state in the statistics; an attach arms new
        ones) and give the subscriber slot back (no finalize)."""
        if self._uvm is not None:
            self._uvm.stop()
        self._enabled = []
        if self._native_subscriber and self._sink is not None:
            self._sink.unsubscribe()
            self._native_subscriber = False
        if self._subscriber is not None:
            try:
                cupti.unsubscribe(self._subscriber)
            except Exception:  # noqa: BLE001
                pass
            self._subscriber = None

    def _resubscribe(self, cupti: Any, sink: Sink) -> None:
        """Take the subscriber slot again the way :meth:`start` took it."""
        if self._api_from_callback:
            self._native_subscriber = sink.subscribe() == 0
            if self._native_subscriber:
                return
            self._api_from_callback = False
            self._warn_once("the API callback could not subscribe again after a detach; API records come from "
                            "CUPTI's activity kinds from here on")
        self._subscriber = attach.take_slot(cupti, self.warnings)


__all__ = ["Detaching"]
