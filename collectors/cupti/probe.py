"""Finding libcupti, checking that CUPTI can run here, and checking CUPTI's clock.

Nothing here keeps state; :class:`perfscope.collectors.cupti.collector.CuptiCollector`
uses these before it enables anything.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: CUPTI API versions whose record layouts perfscope decodes (13.0.x)
SUPPORTED_API = range(130000, 130100)
LIBCUPTI_SONAME = "libcupti.so.13"


def mapped_libcupti() -> str | None:
    """Path of the libcupti already mapped into this process (Linux), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                if "libcupti.so" in line:
                    path = line.split(None, 5)[-1].strip()
                    if path.startswith("/"):
                        return path
    except OSError:
        pass
    return None


def libcupti_path() -> str | None:
    """The libcupti file cupti-python loads (or has loaded): one CUPTI instance per process.

    Order: the copy already mapped in this process; ``nvidia/cu13/lib/libcupti.so.13`` of
    the ``nvidia-cuda-cupti`` wheel (where cupti-python 13.0 finds it); None otherwise.
    """
    mapped = mapped_libcupti()
    if mapped:
        return mapped
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for base in (spec.submodule_search_locations or []) if spec else []:
        p = Path(base) / "cu13" / "lib" / LIBCUPTI_SONAME
        if p.exists():
            return str(p)
    return None


def nvtx_injection_env() -> dict[str, str]:
    """Environment that routes NVTX calls to CUPTI (``MARKER`` records).

    Returns:
        ``{"NVTX_INJECTION64_PATH": <the libcupti cupti-python uses>}``, or ``{}`` when no
        libcupti is found or another tool (Nsight Systems) already set the variable.
        NVTX reads it once, at the process's first NVTX call: set it in a child's
        environment, or in ``os.environ`` before anything calls NVTX.
    """
    if os.environ.get("NVTX_INJECTION64_PATH"):
        return {}
    path = libcupti_path()
    return {"NVTX_INJECTION64_PATH": path} if path else {}


def _libcuda() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def gpu_count() -> tuple[int, str]:
    """(number of CUDA devices, reason when 0) through the driver API (cuInit + cuDeviceGetCount)."""
    cuda = _libcuda()
    if cuda is None:
        return 0, "no NVIDIA driver (libcuda.so.1 not found)"
    rc = cuda.cuInit(0)
    if rc != 0:
        return 0, f"cuInit failed with CUDA error {rc} (no usable GPU)"
    n = ctypes.c_int(0)
    rc = cuda.cuDeviceGetCount(ctypes.byref(n))
    if rc != 0 or n.value == 0:
        return 0, "the NVIDIA driver reports no GPU"
    return n.value, ""


def cupti_version(path: str) -> int | None:
    """``cuptiGetVersion()`` of the libcupti at ``path`` (e.g. 130001), or None."""
    try:
        lib = ctypes.CDLL(path)
        v = ctypes.c_uint32(0)
        return int(v.value) if lib.cuptiGetVersion(ctypes.byref(v)) == 0 else None
    except (OSError, AttributeError):
        return None


def gpu_present() -> bool:
    """True when this machine appears to have an NVIDIA GPU (device nodes, or torch says so
    once its import has finished; never initialises CUDA itself)."""
    if os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0"):
        return True
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - half-imported or CPU-only torch
        return False


def available() -> tuple[bool, str]:
    """Can this process record GPU activity through CUPTI?

    Returns:
        ``(True, "")``, or ``(False, reason)`` naming what is missing: cupti-python, the
        native sink, the NVIDIA driver or a GPU, a libcupti of a supported version.
        Initialises the CUDA driver (cuInit) but creates no context.
    """
    try:
        from cupti import cupti
    except ImportError:
        return False, "cupti-python is not installed (pip install 'perfscope[gpu]', which pins cupti-python==13.0.1)"
    except Exception as e:  # noqa: BLE001 - cupti-python raises its own errors when libcupti is broken
        return False, f"cupti-python cannot be imported: {e}"
    from perfscope.collectors.cupti import native
    from perfscope.errors import CuptiUnavailableError

    try:
        native.load()
    except CuptiUnavailableError as e:
        return False, str(e)
    n, why = gpu_count()
    if n == 0:
        return False, why
    try:
        cupti.get_timestamp()  # loads libcupti the way cupti-python does
    except Exception as e:  # noqa: BLE001
        return False, f"libcupti cannot start: {e}"
    path = libcupti_path()
    if path is None:
        return False, "cupti-python loaded no libcupti.so that perfscope can find in /proc/self/maps"
    version = cupti_version(path)
    if version is not None and version not in SUPPORTED_API:
        return False, (f"{path} is CUPTI API version {version}; perfscope decodes CUPTI 13.0 records "
                       "(install nvidia-cuda-cupti==13.0.* with cupti-python==13.0.1)")
    return True, ""


@dataclass
class ClockCheck:
    """Result of comparing CUPTI's clock with CLOCK_REALTIME.

    Attributes:
        offset_ns: add to CUPTI timestamps to get Unix-epoch ns (0 when they already are).
        epoch: True when a CUPTI read fell between two CLOCK_REALTIME reads.
        bracket_ns: width of the tightest (realtime, realtime) bracket seen.
        error_ns: CUPTI read minus the bracket's midpoint on that try.
    """

    offset_ns: int
    epoch: bool
    bracket_ns: int
    error_ns: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_clock(read_cupti: Any, tries: int = 7) -> ClockCheck:
    """Bracket ``read_cupti()`` between two ``clock_gettime_ns(CLOCK_REALTIME)`` reads.

    CUPTI on Linux stamps records with CLOCK_REALTIME; if any try puts the CUPTI read
    inside its bracket, the offset is 0.  Otherwise the offset is realtime midpoint minus
    CUPTI on the tightest try (so a different clock still lands on the epoch axis).
    """
    best: tuple[int, int, bool] | None = None  # (width, error, inside)
    for _ in range(tries):
        lo = time.clock_gettime_ns(time.CLOCK_REALTIME)
        c = int(read_cupti())
        hi = time.clock_gettime_ns(time.CLOCK_REALTIME)
        inside = lo <= c <= hi
        err = c - (lo + hi) // 2
        if inside:
            return ClockCheck(0, True, hi - lo, err)
        if best is None or hi - lo < best[0]:
            best = (hi - lo, err, inside)
    assert best is not None
    return ClockCheck(-best[1], False, best[0], best[1])


def torch_profiler_active() -> bool:
    """True when torch is imported and its (Kineto) profiler is recording right now."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled)
    except AttributeError:
        try:
            return bool(torch._C._autograd._profiler_enabled())
        except Exception:  # noqa: BLE001
            return False


def external_tool() -> str | None:
    """Name of an injected CUDA tool (Nsight Systems and the like) holding CUPTI, or None."""
    inj = os.environ.get("CUDA_INJECTION64_PATH", "")
    if any(k.startswith("NSYS_") for k in os.environ) or "nsys" in inj.lower() or "ToolsInjection" in inj:
        return "Nsight Systems"
    if inj and inj.lower() != "none":
        return f"the CUDA injection library {inj}"
    return None
