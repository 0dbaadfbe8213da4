"""NVML sampler: GPU health over time into the ``metrics`` table.

:class:`NvmlSampler` runs one background thread that, every ``interval_s``, reads for each
GPU its SM and memory utilisation, memory used, power, SM and memory clocks, temperature
and clocks-event (throttle) reasons, and every ``pcie_interval_s`` its PCIe TX/RX
throughput.  Rows go to the ``metrics`` table in long format (``ts_ns``, ``device``,
``metric``, ``value``; metric names and units as declared in
:mod:`perfscope.store.schema`).

Overhead stays bounded: one NVML handle per device opened once; rows collect in plain
arrays and reach the writer about once a second; a metric the GPU does not support is
dropped after its first failure instead of being retried every tick; PCIe throughput
(a call that blocks about 20 ms inside NVML while it measures) is read less often; and a
tick that overruns is skipped rather than queued.  The duration of every sample loop is
kept in :meth:`NvmlSampler.stats`.

Between a schedule's windows the sampler is paused (:attr:`NvmlSampler.paused`): its thread
hands over the rows it holds and then sleeps until the next window (no NVML call, no
wake-up), so the ``metrics`` table, like the others, holds the windows only (samples of a
warm-up are dropped with its other rows).  A pause lands at the step boundary that ends a
window, so a sample already under way may be stamped up to one NVML read later than it.

Without NVML (no driver, no GPU, no ``pynvml``) the sampler is a no-op: after ``start()``
``available`` is False and ``reason`` says why, so CI and CPU-only jobs record without it.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Protocol

from perfscope.collectors.base import CollectorContext, CollectorStats
from perfscope.collectors.host.environment import (
    CLOCK_MEM,
    CLOCK_SM,
    PCIE_UTIL_RX_BYTES,
    PCIE_UTIL_TX_BYTES,
    TEMPERATURE_GPU,
    load_nvml,
)

# Metric names, exactly as perfscope/store/schema.py documents them.
METRICS = (
    "sm_util_pct", "mem_util_pct", "mem_used_bytes", "power_w", "sm_clock_mhz",
    "mem_clock_mhz", "temp_c", "throttle_reasons", "pcie_tx_bytes_s", "pcie_rx_bytes_s",
)


class MetricsWriter(Protocol):
    """What the sampler needs from :class:`perfscope.store.RankWriter`."""

    def append(self, table_name: str, data: Any) -> None: ...


class NvmlSampler:
    """Samples NVML metrics of some GPUs on a background thread into ``metrics``.

    Args:
        writer: where rows go (a :class:`perfscope.store.RankWriter`); ``append("metrics",
            {...})`` is called about every ``append_interval_s`` and once at :meth:`stop`.
        interval_s: time between samples of the fast metrics (default 100 ms).
        devices: NVML device indices to sample (all GPUs when None).
        pcie_interval_s: time between PCIe throughput samples (each blocks ~20 ms per
            direction inside NVML, so it is read less often); 0 disables them.
        append_interval_s: how long rows collect before they are handed to the writer.
        nvml: a pynvml-like module (tests pass a fake); None imports ``pynvml``.

    Use ``start()``/``stop()`` or ``with NvmlSampler(w): ...``.
    """

    def __init__(
        self,
        writer: MetricsWriter,
        *,
        interval_s: float = 0.1,
        devices: list[int] | None = None,
        pcie_interval_s: float = 1.0,
        append_interval_s: float = 1.0,
        nvml: Any = None,
    ) -> None:
        self.writer = writer
        self.interval_s = float(interval_s)
        self.devices = None if devices is None else [int(d) for d in devices]
        self.pcie_interval_s = float(pcie_interval_s)
        self.append_interval_s = float(append_interval_s)
        self._nvml_arg = nvml
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}
        self._unsupported: dict[int, set[str]] = {}
        self._rows: dict[str, list[Any]] = _empty_rows()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._running = threading.Event()  # clear while paused: the thread sleeps on it
        self._running.set()
        self._thread: threading.Thread | None = None
        # None until start() has tried NVML; then True (sampling) or False (see ``reason``).
        self.available: bool | None = None
        self.reason: str | None = None
        self._started = False
        self._stopped = False
        # Stats: counts, and the duration of recent sample loops (bounded memory).
        self._loops = 0
        self._loop_ns_total = 0
        self._loop_ns_max = 0
        self._recent_loop_ns: deque[int] = deque(maxlen=4096)
        self._late_ticks = 0
        self._rows_sampled = 0
        self._rows_appended = 0
        self._appends = 0
        self._dropped_rows = 0
        self._append_errors: list[str] = []
        self._first_ts: int | None = None
        self._last_ts: int | None = None

    @property
    def paused(self) -> bool:
        """True between a schedule's windows: nothing is sampled and the thread sleeps."""
        return not self._running.is_set()

    @paused.setter
    def paused(self, value: bool) -> None:
        if value:
            self._running.clear()
        else:
            self._running.set()

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> NvmlSampler:
        """Open NVML and the device handles and start the thread; a no-op without NVML."""
        if self._started:
            return self
        self._started = True
        self.available = False
        if self.interval_s <= 0:
            self.reason = f"interval_s must be positive, got {self.interval_s}"
            return self
        nvml, reason = load_nvml(self._nvml_arg)
        if nvml is None:
            self.reason = reason
            return self
        self._nvml = nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
            wanted = list(range(count)) if self.devices is None else self.devices
            missing = [d for d in wanted if not 0 <= d < count]
            if missing:
                raise ValueError(f"no GPU {missing} (NVML sees {count})")
            self._handles = {d: nvml.nvmlDeviceGetHandleByIndex(d) for d in wanted}
        except Exception as e:  # noqa: BLE001 - any NVML failure means: sample nothing
            self.reason = f"NVML devices unavailable: {type(e).__name__}: {e}"
            self._shutdown_nvml()
            return self
        if not self._handles:
            self.reason = "NVML sees no GPU"
            self._shutdown_nvml()
            return self
        self._unsupported = {d: set() for d in self._handles}
        self.available = True
        self._thread = threading.Thread(target=self._run, name="perfscope-nvml", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop the thread, hand the last rows to the writer, close NVML; returns :meth:`stats`."""
        if self._stopped:
            return self.stats()
        self._stopped = True
        self._stop.set()
        self._running.set()  # a paused thread wakes up to end
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 10 * self.interval_s))
        self._append()
        self._shutdown_nvml()
        return self.stats()

    def __enter__(self) -> NvmlSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _shutdown_nvml(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - nothing useful to do at shutdown
                pass
            self._nvml = None

    # -- sampling -------------------------------------------------------------------------
    def _run(self) -> None:
        # The first sample one interval after start: a recording that starts between two
        # windows pauses the sampler right after starting it, before anything is read.
        self._stop.wait(self.interval_s)
        next_tick = time.monotonic()
        next_pcie = next_tick
        last_append = next_tick
        while not self._stop.is_set():
            if self.paused:
                self._append()  # the window's last rows, before a sleep that may be long
                self._running.wait()
                next_tick = next_pcie = last_append = time.monotonic()
                continue
            t0 = time.perf_counter_ns()
            pcie = self.pcie_interval_s > 0 and time.monotonic() >= next_pcie
            if pcie:
                next_pcie = time.monotonic() + self.pcie_interval_s
            self.sample_once(pcie=pcie)
            dt = time.perf_counter_ns() - t0
            self._loops += 1
            self._loop_ns_total += dt
            self._loop_ns_max = max(self._loop_ns_max, dt)
            self._recent_loop_ns.append(dt)
            now = time.monotonic()
            if now - last_append >= self.append_interval_s:
                self._append()
                last_append = now
            next_tick += self.interval_s
            if next_tick < now:
                # Overran: skip the missed ticks instead of sampling in a burst.
                self._late_ticks += 1
                next_tick = now + self.interval_s
            self._stop.wait(max(0.0, next_tick - time.monotonic()))

    def sample_once(self, *, pcie: bool = True) -> int:
        """Read every metric of every device once into the pending rows; returns rows added."""
        added = 0
        for device, h in self._handles.items():
            ts = time.time_ns()
            values = self._read(device, h, pcie)
            if not values:
                continue
            with self._lock:
                rows = self._rows
                for metric, value in values:
                    rows["ts_ns"].append(ts)
                    rows["device"].append(device)
                    rows["metric"].append(metric)
                    rows["value"].append(value)
            added += len(values)
            if self._first_ts is None:
                self._first_ts = ts
            self._last_ts = ts
        self._rows_sampled += added
        return added

    def _read(self, device: int, h: Any, pcie: bool) -> list[tuple[str, float]]:
        nvml = self._nvml
        skip = self._unsupported[device]
        out: list[tuple[str, float]] = []

        def get(metric: str, fn: str, *args: Any) -> Any:
            if metric in skip:
                return None
            try:
                return getattr(nvml, fn)(h, *args)
            except Exception:  # noqa: BLE001 - NotSupported/NoPermission: stop asking
                skip.add(metric)
                return None

        util = get("utilization", "nvmlDeviceGetUtilizationRates")
        if util is not None:
            out += [("sm_util_pct", float(util.gpu)), ("mem_util_pct", float(util.memory))]
        mem = get("mem_used_bytes", "nvmlDeviceGetMemoryInfo")
        if mem is not None:
            out.append(("mem_used_bytes", float(mem.used)))
        power = get("power_w", "nvmlDeviceGetPowerUsage")
        if power is not None:
            out.append(("power_w", power / 1000.0))  # NVML reports milliwatts
        for metric, fn, args in (
            ("sm_clock_mhz", "nvmlDeviceGetClockInfo", (CLOCK_SM,)),
            ("mem_clock_mhz", "nvmlDeviceGetClockInfo", (CLOCK_MEM,)),
            ("temp_c", "nvmlDeviceGetTemperature", (TEMPERATURE_GPU,)),
        ):
            v = get(metric, fn, *args)
            if v is not None:
                out.append((metric, float(v)))
        reasons = get("throttle_reasons", _throttle_fn(nvml))
        if reasons is not None:
            out.append(("throttle_reasons", float(reasons)))
        if pcie:
            for metric, counter in (("pcie_tx_bytes_s", PCIE_UTIL_TX_BYTES), ("pcie_rx_bytes_s", PCIE_UTIL_RX_BYTES)):
                v = get(metric, "nvmlDeviceGetPcieThroughput", counter)
                if v is not None:
                    out.append((metric, float(v) * 1024.0))  # NVML reports KiB/s
        return out

    def _append(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, _empty_rows()
        n = len(rows["ts_ns"])
        if not n:
            return
        try:
            self.writer.append("metrics", rows)
        except Exception as e:  # noqa: BLE001 - a full disk must not kill the training job
            self._dropped_rows += n
            if len(self._append_errors) < 5:
                self._append_errors.append(f"{type(e).__name__}: {e}")
            return
        self._appends += 1
        self._rows_appended += n

    # -- reporting ------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Return what the sampler did, for the rank's metadata.

        Keys: ``available``, ``reason``, ``devices``, ``interval_s``, ``pcie_interval_s``,
        ``loops``, ``loop_ms_mean``, ``loop_ms_p99``, ``loop_ms_max`` (time spent reading
        NVML per loop), ``late_ticks`` (loops that overran the interval), ``rows``,
        ``rows_appended``, ``appends``, ``dropped_rows``, ``append_errors``,
        ``unsupported`` ({device: [metric]}), ``first_ts_ns``, ``last_ts_ns``.
        """
        recent = sorted(self._recent_loop_ns)
        p99 = recent[min(len(recent) - 1, int(0.99 * len(recent)))] if recent else 0
        return {
            "available": self.available,
            "reason": self.reason,
            "devices": sorted(self._handles),
            "interval_s": self.interval_s,
            "pcie_interval_s": self.pcie_interval_s,
            "loops": self._loops,
            "loop_ms_mean": (self._loop_ns_total / self._loops / 1e6) if self._loops else 0.0,
            "loop_ms_p99": p99 / 1e6,
            "loop_ms_max": self._loop_ns_max / 1e6,
            "late_ticks": self._late_ticks,
            "rows": self._rows_sampled,
            "rows_appended": self._rows_appended,
            "appends": self._appends,
            "dropped_rows": self._dropped_rows,
            "append_errors": list(self._append_errors),
            "unsupported": {str(d): sorted(m) for d, m in self._unsupported.items() if m},
            "first_ts_ns": self._first_ts,
            "last_ts_ns": self._last_ts,
        }


def _empty_rows() -> dict[str, list[Any]]:
    return {"ts_ns": [], "device": [], "metric": [], "value": []}


def _throttle_fn(nvml: Any) -> str:
    # Renamed "clocks event reasons" in NVML 12.x; the old name still exists and is deprecated.
    return "nvmlDeviceGetCurrentClocksEventReasons" if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons") else "nvmlDeviceGetCurrentClocksThrottleReasons"


class NvmlRecording:
    """The NVML collector for the recorder: an :class:`NvmlSampler` over the rank's writer.

    Without NVML it does not run and says nothing (the CUPTI collector's no-GPU note covers it).
    """

    def __init__(self) -> None:
        self._sampler: NvmlSampler | None = None

    def start(self, ctx: CollectorContext) -> bool:
        """Start sampling every ``ctx.options.nvml_interval_s``; False without NVML."""
        try:
            sampler = NvmlSampler(ctx.writer, interval_s=ctx.options.nvml_interval_s)  # type: ignore[arg-type]
            sampler.start()
        except Exception as e:  # noqa: BLE001
            ctx.note(f"NVML sampling failed to start ({type(e).__name__}: {e}); no GPU metrics")
            return False
        if sampler.available is False:
            return False
        self._sampler = sampler
        return True

    def flush(self) -> None:
        """Nothing to do: the sampler hands rows to the writer about once a second."""

    def pause(self) -> None:
        """Between a schedule's windows: sample nothing (the thread sleeps)."""
        if self._sampler is not None:
            self._sampler.paused = True

    def resume(self) -> None:
        """A window's warm-up begins: sample again."""
        if self._sampler is not None:
            self._sampler.paused = False

    def stop(self) -> CollectorStats:
        """Stop the sampler; its statistics go to ``collector_stats["nvml"]``."""
        sampler, self._sampler = self._sampler, None
        if sampler is None:
            return CollectorStats()
        stats = sampler.stop()
        return CollectorStats(details={"nvml": stats} if isinstance(stats, dict) else {})


__all__ = ["NvmlSampler", "NvmlRecording", "METRICS"]
