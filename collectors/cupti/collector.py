"""The CUPTI activity collector: enables kinds, drains the native sink, writes store tables.

Per record, only C runs (``sink.c``, on CUPTI's thread or inside ``cuptiActivityFlushAll``).
Two ways on from there:

* in-process (``segment_dir`` None): per flush, Python takes each kind's records as one
  byte array and decodes it with NumPy (:mod:`perfscope.collectors.cupti.decode`) into the
  writer;
* out of process (``segment_dir`` set): the sink's own C thread flushes CUPTI and writes
  the records to segment files (:mod:`perfscope.collectors.cupti.segments`) every
  ``segment_interval_s``; the training process runs no Python per record or per buffer,
  and a decoder in another process (:mod:`perfscope.collectors.cupti.decoder`) writes the
  tables.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from pathlib import Path

from perfscope.collectors.cupti import attach, cbids, decode, layouts, probe, uvm
from perfscope.collectors.cupti.uvm import MODES as UVM_MODES
from perfscope.collectors.base import Writer
from perfscope.collectors.cupti.decoder import RecordStream
from perfscope.collectors.cupti.detaching import Detaching
from perfscope.collectors.cupti.native import Sink
from perfscope.errors import CollectorError, CuptiUnavailableError, UsageError

#: collector kind name -> CUPTI activity kinds it enables
KINDS: dict[str, tuple[int, ...]] = {
    "kernel": (layouts.KIND_CONCURRENT_KERNEL,),
    "memcpy": (layouts.KIND_MEMCPY, layouts.KIND_MEMCPY2),
    "memset": (layouts.KIND_MEMSET,),
    "sync": (layouts.KIND_SYNCHRONIZATION,),
    "runtime": (layouts.KIND_RUNTIME,),
    "driver": (layouts.KIND_DRIVER,),
    "nvtx": (layouts.KIND_MARKER,),
    "overhead": (layouts.KIND_OVERHEAD,),
    "uvm": (layouts.KIND_UNIFIED_MEMORY_COUNTER,),
}
# "driver" too: cuBLAS, cuDNN and Triton launch through the driver API (cuLaunchKernelEx),
# so without it their kernels (the GEMMs) link to no launching call.
# "uvm": Unified Memory migrations and page faults; a job without managed memory gets no records.
DEFAULT_KINDS = ("kernel", "memcpy", "memset", "sync", "runtime", "driver", "nvtx", "uvm")
#: Where API records come from: ``callback``, the sink's own CUPTI callback for just the
#: launch/copy/sync ids (falls back to ``activity`` when it cannot subscribe), or
#: ``activity``, CUPTI's RUNTIME/DRIVER activity kinds filtered per id.
API_SOURCES = ("callback", "activity")
DEFAULT_API_SOURCE = "callback"
_API_DOMAIN = {layouts.KIND_DRIVER: 1, layouts.KIND_RUNTIME: 2}  # CUpti_CallbackDomain


def _cupti() -> Any:
    from cupti import cupti

    return cupti


class CuptiCollector(Detaching):
    """Records GPU activity through CUPTI into a rank's store tables.

    Args:
        writer: receives ``append(table, pyarrow.Table)`` for ``kernels``, ``memcpy``,
            ``memset``, ``sync``, ``api`` and ``markers`` (None with ``segment_dir``).
        kinds: any of ``kernel``, ``memcpy`` (incl. peer copies), ``memset``, ``sync``,
            ``runtime`` (runtime API calls that launch, copy or synchronise), ``driver``
            (the same for driver API calls: Triton launches), ``nvtx`` (NVTX ranges; needs
            NVTX routed to CUPTI, see :func:`nvtx_injection_env`), ``uvm`` (Unified Memory
            migrations and page faults, armed once a CUDA context exists: :mod:`.uvm`),
            ``overhead`` (CUPTI's own overhead records, summarised in :meth:`stop`'s
            statistics only).
        buffer_mb: size of each activity buffer handed to CUPTI.
        max_buffers: buffers CUPTI may hold at once (past it records are dropped and counted).
        max_pending_mb: records waiting in the sink between flushes (past it: dropped, counted).
        api_source: where ``runtime``/``driver`` records come from: ``callback`` (default;
            the sink subscribes to CUPTI's callback API for just the kept call ids and
            makes the records itself, so other API calls cost nothing) or ``activity``
            (CUPTI's RUNTIME/DRIVER activity kinds, which trace every call and are
            filtered per id).  ``callback`` falls back to ``activity`` when the subscriber
            slot is held by an idle Kineto.  Default ``callback`` (the recorder passes
            ``PERFSCOPE_CUPTI_API`` through its options).
        segment_dir: write records to segment files in this folder (created) instead of
            decoding them here; :meth:`flush` then does nothing in Python.
        segment_interval_s: seconds between segment writes (the most a killed process loses).
        segment_mb: largest segment file.
        detach: let go of CUPTI entirely (``cuptiFinalize``) at :meth:`pause` and
            :meth:`stop`, and attach again at :meth:`resume`.  Disabling the kinds leaves
            most of CUPTI's cost in place: on the H200 the transformer step of
            ``benchmarks/pause_cost.py`` took 1.2-1.4x its time recording, 1.20-1.30x paused
            or stopped, 0.94-1.06x detached (one block of 10: 1.19x); a detach took 17-20
            ms, attaching again 11 ms, but 2.0 s with the Unified Memory counters armed, so
            none is made then.  Not done while torch.profiler or another client shares CUPTI.
        uvm_counters: when to arm the Unified Memory counters (:func:`.uvm.arm`): ``auto`` (at the
            job's first managed allocation the API callback sees), ``always``, ``off``.

    Attributes:
        clock_offset_ns: add to CUPTI timestamps for Unix-epoch ns; 0 when CUPTI already
            stamps with CLOCK_REALTIME (checked at :meth:`start`).  Rows written are
            already corrected.
        warnings: human-readable problems seen while recording (for the rank's metadata).
    """

    def __init__(
        self,
        writer: Writer | None,
        *,
        kinds: Iterable[str] = DEFAULT_KINDS,
        buffer_mb: int = 8,
        max_buffers: int = 64,
        max_pending_mb: int = 1024,
        api_source: str | None = None,
        segment_dir: str | os.PathLike[str] | None = None,
        segment_interval_s: float = 2.0,
        segment_mb: int = 64,
        detach: bool = False,
        uvm_counters: str = "auto",
    ) -> None:
        kinds = tuple(kinds)
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise UsageError(f"unknown CUPTI collector kind(s) {unknown}; choose from {sorted(KINDS)}")
        if uvm_counters not in UVM_MODES:
            raise UsageError(f"unknown Unified Memory counter mode {uvm_counters!r}; choose from {list(UVM_MODES)}")
        self.uvm_mode = uvm_counters
        self.writer = writer
        self.kinds = kinds
        self.buffer_mb = int(buffer_mb)
        self.max_buffers = int(max_buffers)
        self.max_pending_mb = int(max_pending_mb)
        api_source = api_source or DEFAULT_API_SOURCE
        if api_source not in API_SOURCES:
            raise UsageError(f"unknown CUPTI API-record source {api_source!r}; choose from {list(API_SOURCES)}")
        self.api_source = api_source
        if writer is None and segment_dir is None:
            raise UsageError("a CuptiCollector needs a writer, or a segment_dir to write segments to")
        self.segment_dir = Path(segment_dir) if segment_dir is not None else None
        self.segment_interval_s = float(segment_interval_s)
        self.segment_mb = int(segment_mb)
        self.clock_offset_ns = 0
        self.warnings: list[str] = []
        self._cupti_kinds = sorted({k for name in kinds for k in KINDS[name]})
        self._sink: Sink | None = None
        self._enabled: list[int] = []
        self._subscriber: Any = None
        self._uvm: uvm.UvmCounters | None = None
        self._native_subscriber = False
        self._api_from_callback = False
        self._lock = threading.Lock()
        self._stream = RecordStream(_STRINGS)
        self._decode_ns = 0
        self._flush_ns = 0
        self._flushes = 0
        self._start_ns = 0
        self._setup_ns = 0
        self._clock: probe.ClockCheck | None = None
        self._state = "new"
        self._raw_log: list[dict[str, np.ndarray]] | None = None  # tests: keep raw drains
        self._paused = False
        self._drain_paused = False  # paused since the last flush: force-flush once
        self.detach = bool(detach)
        self._detached = False  # CUPTI finalized by pause(); resume() attaches again
        self._stats_clock: probe.ClockCheck | None = None  # the clock checked before a finalize at stop
        self.detaches = 0
        self._detach_ns = self._attach_ns = 0  # time the training thread spent letting go / attaching again

    # ------------------------------------------------------------------ start ----
    def start(self) -> None:
        """Check CUPTI, register the native sink and enable the activity kinds.

        Raises:
            CuptiUnavailableError: no GPU, no cupti-python or libcupti, unsupported CUPTI,
                or CUPTI is held by another tool (torch.profiler, Nsight Systems); the
                message says which.  Nothing stays enabled after the error.
            CollectorError: the collector was already started, or another one is
                recording in this process (the native sink and CUPTI are per process).
        """
        if self._state != "new":
            raise CollectorError("this CuptiCollector was already started; create a new one")
        t0 = time.perf_counter_ns()
        with _ACTIVE_LOCK:
            if _ACTIVE:
                raise CollectorError("another CuptiCollector is recording in this process (CUPTI and perfscope's sink "
                                     "serve one recording at a time); stop it first")
            _ACTIVE.append(self)
        try:
            self._start_checked(t0)
        except BaseException:
            _release(self)
            raise

    def _start_checked(self, t0: int) -> None:
        """:meth:`start` once this collector is the process's only one."""
        ok, why = probe.available()
        if not ok:
            raise CuptiUnavailableError(f"GPU activity cannot be recorded: {why}")
        if probe.torch_profiler_active():
            raise CuptiUnavailableError(
                "torch.profiler is recording in this process and CUPTI takes one client at a time on this driver; "
                "stop it first, or record with torch.profiler alone and read its trace with `perfscope import kineto`"
            )
        cupti = _cupti()
        sink = self._open_sink()
        if not self._subscribe_native(sink):
            self._subscriber = attach.take_slot(cupti, self.warnings)
        try:
            sink.reset()  # only now: a start refused above must not touch another's records
            self._start_sink(cupti, sink)
        except BaseException:
            self._teardown(cupti)
            raise
        self._state = "running"
        self._start_ns = time.time_ns()
        self._setup_ns = time.perf_counter_ns() - t0

    def _open_sink(self) -> Sink:
        sink = Sink()
        path = probe.libcupti_path()
        if path is None:
            raise CuptiUnavailableError("cannot find the libcupti that cupti-python loaded")
        sink.open(path)
        self._sink = sink
        return sink

    def _subscribe_native(self, sink: Sink) -> bool:
        """In ``callback`` mode, take the subscriber slot with the sink's API callback.

        Returns:
            True when the sink holds the slot; False when API records come from the
            activity kinds (``activity`` mode, no API kind asked for, or the slot is
            taken: :meth:`_subscribe` then says by whom, or accepts an idle Kineto).
        """
        if self.api_source != "callback" or not any(k in _API_DOMAIN for k in self._cupti_kinds):
            return False
        self._native_subscriber = self._api_from_callback = sink.subscribe() == 0
        return self._native_subscriber

    def _start_sink(self, cupti: Any, sink: Sink) -> None:
        sink.configure(self._cupti_kinds)
        sink.set_api_filter(cbids.RUNTIME, cbids.DRIVER)
        sink.set_limits(self.buffer_mb << 20, self.max_buffers, self.max_pending_mb << 20)
        self._sink = sink
        if "nvtx" in self.kinds:
            # NVTX reads this at its first call in the process; harmless if that already happened.
            for name, v in probe.nvtx_injection_env().items():
                os.environ.setdefault(name, v)
        self._attach(cupti, sink)
        self._clock = probe.check_clock(cupti.get_timestamp)
        self.clock_offset_ns = self._clock.offset_ns
        if self.segment_dir is not None:
            self.segment_dir.mkdir(parents=True, exist_ok=True)
            sink.segments_open(self.segment_dir, self.clock_offset_ns, self.segment_interval_s, self.segment_mb << 20)

    def _attach(self, cupti: Any, sink: Sink) -> None:
        """Hand CUPTI the sink's buffers and enable the kinds (at start, and at each
        resume after a detach: ``cuptiFinalize`` forgot all of it)."""
        try:
            cupti.set_thread_id_type(cupti.ActivityThreadIdType.SYSTEM)  # tids = gettid(), like host hooks
        except Exception as e:  # noqa: BLE001
            self.warnings.append(f"cannot make CUPTI report system thread ids: {e}")
        rc = sink.register()
        if rc != 0:
            raise CuptiUnavailableError(f"cuptiActivityRegisterCallbacks failed (CUPTI error {rc})")
        for k in self._cupti_kinds:
            if k == layouts.KIND_UNIFIED_MEMORY_COUNTER:
                continue  # armed below, once a CUDA context exists
            if self._native_subscriber and k in _API_DOMAIN:
                refused = sink.enable_api(_API_DOMAIN[k], cbids.RUNTIME if k == layouts.KIND_RUNTIME else cbids.DRIVER)
                if refused:
                    self.warnings.append(f"CUPTI refused the API callback for {refused} {layouts.LAYOUTS[k].name} call ids")
                continue
            try:
                cupti.activity_enable(k)
            except cupti.cuptiError as e:
                raise CuptiUnavailableError(
                    f"CUPTI refused to enable activity kind {cupti.ActivityKind(k).name}: {e}. "
                    "Another tool may hold CUPTI (Nsight Systems, torch.profiler)"
                ) from None
            self._enabled.append(k)
        self._filter_api(cupti)
        if layouts.KIND_UNIFIED_MEMORY_COUNTER in self._cupti_kinds:
            seen = sink.managed_seen if self._native_subscriber and self._api_from_callback else None
            self._uvm = uvm.arm(cupti, self._warn_once, self.uvm_mode, seen)

    def _filter_api(self, cupti: Any) -> None:
        """Turn off CUPTI's records of API calls perfscope does not keep (:func:`.attach.filter_api`)."""
        attach.filter_api(cupti, self._enabled)

    # ------------------------------------------------------------ pause/resume ----
    def pause(self) -> None:
        """Stop collecting until :meth:`resume`: disable the activity kinds and the API
        callbacks, so that between a schedule's windows launches cost CUPTI nothing.

        The records collected so far stay in CUPTI's buffers and the sink; the next
        :meth:`flush` force-flushes once, so a window's records reach the writer without
        waiting for the next window to fill the buffer.
        """
        if self._state != "running" or self._paused:
            return
        cupti = _cupti()
        for k in self._enabled:
            try:
                cupti.activity_disable(k)
            except Exception:  # noqa: BLE001 - a kind CUPTI cannot disable keeps recording; the window filter drops it
                pass
        if self._native_subscriber and self._sink is not None:
            self._sink.switch_api(False)
        self._paused = True
        self._drain_paused = True
        if self.detach and self._may_detach():
            self._let_go(cupti)

    def resume(self) -> None:
        """Collect again after :meth:`pause` (a no-op when not paused)."""
        if self._state != "running" or not self._paused:
            return
        cupti = _cupti()
        if self._detached:
            self._reattach(cupti)
            return
        for k in self._enabled:
            cupti.activity_enable(k)
        self._filter_api(cupti)  # enabling RUNTIME/DRIVER again reset CUPTI's per-id switches
        if self._native_subscriber and self._sink is not None:
            self._sink.switch_api(True)
        self._paused = False

    # ------------------------------------------------------------------ flush ----
    def flush(self) -> None:
        """Deliver CUPTI's completed buffers to the sink and hand decoded rows to the writer
        (once after a pause, the partly filled buffers too); with ``segment_dir`` the sink's
        thread does its part on its own: nothing to do (a paused window's last, partly filled
        buffer then reaches the segments with the next window or at stop)."""
        if self._state != "running" or self._sink is None:
            return
        if self.segment_dir is None:
            self._flush_in_process()
        if probe.torch_profiler_active():
            self._warn_once("torch.profiler started while perfscope was recording; CUPTI serves one client, so GPU "
                            "records after that point are missing (read torch.profiler's trace with `perfscope import kineto`)")

    def _flush_in_process(self) -> None:
        assert self._sink is not None
        with self._lock:
            t0 = time.perf_counter_ns()
            forced, self._drain_paused = self._paused and self._drain_paused, False
            self._sink.flush(forced=forced)
            self._flush_ns += time.perf_counter_ns() - t0
            self._drain()

    def _warn_once(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    def _drain(self) -> None:
        assert self._sink is not None
        t0 = time.perf_counter_ns()
        blob, first = self._sink.take_strings()
        if blob:
            self._stream.strings.extend(blob, first)
        raw: dict[str, decode.Columns] = {}
        for k in self._cupti_kinds:
            lay = layouts.LAYOUTS[k]
            if self._raw_log is None:
                raw[lay.name] = decode.Columns(self._sink.take_columns(k))
            else:  # tests: keep the raw bytes too (tests/data/cupti samples)
                data = self._sink.take(k)
                self._raw_log.append({lay.name: data.copy()})
                raw[lay.name] = decode.as_columns(decode.records(data, lay))
        assert self.writer is not None
        for table, batch in self._stream.decode(raw, self.clock_offset_ns).items():
            self.writer.append(table, batch)
        self._decode_ns += time.perf_counter_ns() - t0
        self._flushes += 1

    # ------------------------------------------------------------------- stop ----
    def stop(self) -> dict[str, Any]:
        """Flush everything, disable the kinds and return statistics.

        With ``detach``, CUPTI is finalized at the end (when perfscope alone used it), so the
        rest of the process pays nothing for it; a later collector or torch.profiler attaches
        it again (both recorded on the H200).  Without, it stays attached, every kind disabled.

        Returns:
            ``rows`` (rows written per store table), ``records`` (CUPTI records seen and
            kept per kind name), ``dropped`` (``cupti``: CUPTI's own count, ``sink``: the
            sink was full, ``buffers_refused``: buffer requests refused; the profiler sums
            these), ``untimed_records`` (records CUPTI could not time, left out),
            ``overhead`` (``sink_callback_ns``, ``decode_ns``, ``flush_ns``, ``setup_ns``,
            ``buffers``, ``cupti``: CUPTI's OVERHEAD records by kind), ``clock``
            (``offset_ns``, ``epoch``, ``bracket_ns``, ``error_ns``, ``drift_ns`` between
            start and stop), ``detaches`` (with ``detach_ms``, ``attach_again_ms``: the time the
            ones between windows took), ``warnings``, ``libcupti``, ``cupti_version``.
        """
        if self._state != "running":
            return {"rows": dict(self._stream.rows), "warnings": list(self.warnings)}
        cupti = _cupti()
        try:
            attach.sync_current_context()
            with self._lock:
                assert self._sink is not None
                let_go = self.detach and not self._detached and self._may_detach()
                if self.segment_dir is not None:
                    self._sink.segments_stop_thread()  # its flushes would race the forced one below
                self._sink.flush(forced=False)
                self._teardown(cupti)
                self._sink.flush(forced=True)
                if let_go:
                    self._stats_clock = self._clock_now(cupti)  # the last CUPTI call before the finalize
                    self._sink.set_detached(True)
                    try:
                        cupti.finalize()
                        self._detached = True
                        self.detaches += 1
                    except Exception as e:  # noqa: BLE001
                        self._warn_once(f"cuptiFinalize failed at stop ({e}); CUPTI stays attached (disabled)")
                if self.segment_dir is not None:
                    self._sink.segments_close()
                    self._warn_segment_errors()
                else:
                    self._drain()
            self._state = "stopped"
            return self._stats(cupti)
        finally:
            _release(self)  # only now may another collector start (and reset the sink)

    def _teardown(self, cupti: Any) -> None:
        """Disable what start() enabled and give up the subscriber slot (no finalize)."""
        for k in self._enabled:
            try:
                cupti.activity_disable(k)
            except Exception:  # noqa: BLE001
                pass
        self._drop_subscription(cupti)

    def _stats(self, cupti: Any) -> dict[str, Any]:
        assert self._sink is not None
        s = self._sink.stats()
        api = self._sink.api_stats()
        name_of = {k: lay.name for k, lay in layouts.LAYOUTS.items()}
        seen: dict[int, int] = s["seen"]
        kept: dict[int, int] = s["kept"]
        records = {name_of.get(k, f"kind_{k}"): {"seen": int(v), "kept": int(kept.get(k, 0))} for k, v in seen.items()}
        clock: dict[str, Any] = self._clock.as_dict() if self._clock else {}
        # Once CUPTI is finalized any call would attach it again: the check made before then.
        again = self._stats_clock if self._detached else self._clock_now(cupti)
        if again is not None:
            clock["drift_ns"] = again.offset_ns - (self._clock.offset_ns if self._clock else 0)
            clock["epoch_at_stop"] = again.epoch
        path = probe.libcupti_path()
        return {
            "rows": dict(self._stream.rows),
            "records": records,
            "api_filtered": int(s["api_filtered"]),
            "api_source": "callback" if self._api_from_callback else "activity",
            "detaches": self.detaches, "detach_ms": self._detach_ns / 1e6, "attach_again_ms": self._attach_ns / 1e6,
            "api_callback": api,
            "dropped": {
                "cupti": int(s["dropped_cupti"]), "sink": int(s["dropped_sink"]),
                "buffers_refused": int(s["buffers_refused"]),
                "api_callback": api["api_dropped"], "segment_write": int(s["dropped_segment_write"]),
            },
            "memory": {
                # what the sink held at most besides CUPTI's own state: its buckets (and the
                # buffers a segment write had swapped out) plus the activity buffers
                "peak_pending_bytes": int(s["peak_pending_bytes"]),
                "peak_buffers": int(s["peak_outstanding_buffers"]), "buffer_bytes": int(s["buffer_bytes"]),
            },
            "segments": self._segment_stats(s),
            "untimed_records": self._stream.untimed,
            "overhead": {
                "sink_callback_ns": int(s["callback_ns"]), "sink_callback_max_ns": int(s["callback_ns_max"]),
                "decode_ns": self._decode_ns, "flush_ns": self._flush_ns, "setup_ns": self._setup_ns,
                "flushes": self._flushes, "buffers": int(s["buffers"]), "buffer_bytes": int(s["valid_bytes"]),
                "cupti": dict(self._stream.overhead),
            },
            "clock": clock,
            "kinds": list(self.kinds),
            **({"uvm_counters": self._uvm.state()} if self._uvm is not None else {}),
            "strings": int(s["strings"]),
            "libcupti": path,
            "cupti_version": probe.cupti_version(path) if path else None,
            "started_ns": self._start_ns,
            "stopped_ns": time.time_ns(),
            "warnings": list(self.warnings),
        }


    @staticmethod
    def _clock_now(cupti: Any) -> probe.ClockCheck | None:
        """CUPTI's clock against CLOCK_REALTIME now, or None when CUPTI cannot say."""
        try:
            return probe.check_clock(cupti.get_timestamp)
        except Exception:  # noqa: BLE001
            return None

    def _warn_segment_errors(self) -> None:
        assert self._sink is not None
        s = self._sink.stats()
        if s["segment_errors"]:
            self.warnings.append(
                f"{s['segment_errors']} CUPTI segment file(s) could not be written to {self.segment_dir} "
                f"({os.strerror(int(s['segment_errno']))}); {s['dropped_segment_write']} records are lost"
            )

    def _segment_stats(self, s: dict[str, Any]) -> dict[str, Any] | None:
        """Segment-writer counters (None in-process): files and bytes written, failed writes
        (with the last errno), time spent writing."""
        if self.segment_dir is None:
            return None
        return {"dir": str(self.segment_dir), "files": int(s["segments"]), "bytes": int(s["segment_bytes"]),
                "errors": int(s["segment_errors"]), "errno": int(s["segment_errno"]),
                "write_ns": int(s["segment_write_ns"]), "write_ns_max": int(s["segment_write_ns_max"])}


#: the sink's string table is per process (ids never reset), so its decoded copy is too
_STRINGS = decode.StringTable()
#: the collector recording in this process (at most one: the sink and CUPTI are per process)
_ACTIVE: list[CuptiCollector] = []
_ACTIVE_LOCK = threading.Lock()


def recording() -> bool:
    """True while a CuptiCollector records in this process."""
    return bool(_ACTIVE)


def _release(coll: CuptiCollector) -> None:
    with _ACTIVE_LOCK:
        if coll in _ACTIVE:
            _ACTIVE.remove(coll)

