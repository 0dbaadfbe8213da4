"""Unified Memory counters: CUPTI's migration and page-fault records, armed once CUDA runs.

CUPTI counts Unified Memory events (``CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER``) only for
the counters ``cuptiActivityConfigureUnifiedMemoryCounter`` turned on.  On the H200
(driver 580, libcupti 13.0.85) configuring them at start-up, before the process had
initialised CUDA, recorded nothing, while configuring them once a context existed recorded
every migration and fault; ``perfscope record`` starts long before the program creates its
context.  So
:class:`UvmCounters` arms the counters as soon as a device's primary context (the one
torch, JAX and the runtime API use) is active: at once when one already is, else from a
small thread that polls the driver until one is.

When the collector's API callback sees the calls (the default), the counters wait for the
job's first managed allocation too (``wanted``: the native sink's flag): turning them off
again, at a detach between windows or at stop, took 2.0 s on the H200 (in
``cuptiActivityDisable`` or, left on, in ``cuptiFinalize``), a cost a job that never uses
managed memory should not pay.  The poll then goes on, every :data:`MANAGED_POLL_S`, until
that allocation; migrations in the moments between the allocation and the arming are not
counted, nor managed memory the callback does not watch (``__managed__`` variables, managed
memory pools, HMM system memory: ``PERFSCOPE_CUPTI_UVM=always`` covers them).  Without the
callback the counters are armed at the first context, as before; a process that never uses
managed memory then gets no records, and the poll ends there.
"""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from perfscope.collectors.cupti import layouts

#: when :func:`arm` arms the counters (``PERFSCOPE_CUPTI_UVM``)
MODES = ("auto", "always", "off")
#: the counters perfscope asks for (CUpti_ActivityUnifiedMemoryCounterKind)
COUNTERS = (1, 2, 3, 4, 5, 6, 8)  # htod, dtoh, cpu/gpu page faults, thrashing, throttling, dtod
#: the ones the analysis needs, tried alone when the full set is refused
ESSENTIAL = (1, 2, 3, 4)
POLL_S = 0.01  # waiting for a context: the job's first CUDA call is about to come
MANAGED_POLL_S = 0.05  # waiting for managed memory, maybe for the whole job: a few wake-ups a second


def _libcuda() -> Any:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def active_device() -> int | None:
    """The ordinal of the first device whose primary context is active, or None (no
    context yet, or no driver).  Needs cuInit to have run (``probe.available`` does)."""
    cuda = _libcuda()
    if cuda is None:
        return None
    n = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return None
    for i in range(n.value):
        dev, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
        if cuda.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        if cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0 and active.value:
            return i
    return None


def config(device: int, counters: tuple[int, ...] = COUNTERS) -> np.ndarray:
    """The ``CUpti_ActivityUnifiedMemoryCounterConfig`` array enabling ``counters`` for the
    process on ``device``."""
    cfg = np.zeros(len(counters), layouts.UVM_CONFIG)
    cfg["scope"] = layouts.UVM_SCOPE_SINGLE_DEVICE
    cfg["kind"] = counters
    cfg["device_id"] = device
    cfg["enable"] = 1
    return cfg


class UvmCounters:
    """Arms CUPTI's Unified Memory counters for one recording (see the module docstring).

    Args:
        cupti: the ``cupti.cupti`` module.
        warn: called once with a message when the counters cannot be armed.
        find_device: returns the device to arm for, or None while no context is active
            (tests replace it).
        wanted: returns True once the counters are worth arming (the job allocated managed
            memory); None: as soon as a context is active.
    """

    def __init__(self, cupti: Any, warn: Callable[[str], None],
                 find_device: Callable[[], int | None] = active_device,
                 wanted: Callable[[], bool] | None = None) -> None:
        self._cupti = cupti
        self._warn = warn
        self._find = find_device
        self._wanted = wanted
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.device: int | None = None
        self.counters: tuple[int, ...] = ()
        self.enabled = False

    def start(self) -> None:
        """Arm now when a context is active, else start the polling thread."""
        if self._try_arm():
            return
        self._thread = threading.Thread(target=self._poll, name="perfscope-uvm", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S if self._wanted is None else MANAGED_POLL_S):
            if self._try_arm():
                return

    def _try_arm(self) -> bool:
        """Arm for the active device; True once done or given up (no retry), False while
        there is no context yet."""
        with self._lock:
            if self._stop.is_set() or self.enabled:
                return True
            if self._wanted is not None and not self._wanted():
                return False
            device = self._find()
            if device is None:
                return False
            cupti, error = self._cupti, None
            for counters in (COUNTERS, ESSENTIAL):
                cfg = config(device, counters)
                try:
                    cupti.activity_configure_unified_memory_counter(cfg.ctypes.data, len(cfg))
                    cupti.activity_enable(layouts.KIND_UNIFIED_MEMORY_COUNTER)
                except Exception as e:  # noqa: BLE001 - unsupported here (MIG, vGPU, WSL): record the rest
                    error = e
                else:
                    self.device, self.counters, self.enabled = device, counters, True
                    return True
            self._warn(f"Unified Memory migrations and page faults are not recorded: CUPTI refused its counters ({error})")
            return True

    def stop(self) -> None:
        """Stop polling and disable the counters' activity kind (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        with self._lock:
            if self.enabled:
                try:
                    self._cupti.activity_disable(layouts.KIND_UNIFIED_MEMORY_COUNTER)
                except Exception:  # noqa: BLE001 - stopping must not fail
                    pass
                self.enabled = False

    def state(self) -> dict[str, Any]:
        """``{"device": ordinal or None, "counters": [counter kind names]}`` for the statistics."""
        return {"device": self.device, "counters": [layouts.UVM_COUNTER_KINDS[c] for c in self.counters]}


def arm(cupti: Any, warn: Callable[[str], None], mode: str, managed_seen: Callable[[], bool] | None) -> UvmCounters | None:
    """Start the Unified Memory counters of a recording as ``mode`` says (one of :data:`MODES`):
    ``auto`` arms them at the first managed allocation ``managed_seen`` reports (at the
    first context when there is no such report: API records not from the callback),
    ``always`` at the first context, ``off`` never.  Returns the counters, or None (off)."""
    if mode == "off":
        return None
    counters = UvmCounters(cupti, warn, wanted=managed_seen if mode == "auto" else None)
    counters.start()
    return counters


__all__ = ["UvmCounters", "active_device", "arm", "config", "COUNTERS", "ESSENTIAL", "MODES"]
