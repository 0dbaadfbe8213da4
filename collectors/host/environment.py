"""A read-only snapshot of the facts that decide whether a machine can train at full speed.

:func:`snapshot` reads GPUs through NVML, the process's CPU and memory binding, CPU
frequency governors, NUMA, transparent huge pages, ``/dev/shm``, the locked-memory limit,
InfiniBand devices and the GPUDirect RDMA module, NCCL/CUDA variables and ``nccl.conf``.
It changes nothing and needs no root: whatever cannot be read is left ``None`` and the
reason goes into ``errors``.  Every root it reads from can be replaced, so tests feed it
fake ``/proc`` and ``/sys`` trees and a fake NVML module.

The facts are plain JSON (dicts, lists, str, int, float, bool, None) because they are
stored in ``run.json``.  The checks over them live in :mod:`perfscope.collectors.host.checks`.
"""
from __future__ import annotations

import os
import platform
import re
import resource
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

REAL_PROC = Path("/proc")

# NVML constants, spelled here so that a fake NVML object need not carry them.
CLOCK_SM = 1
CLOCK_MEM = 2
TEMPERATURE_GPU = 0
PCIE_UTIL_TX_BYTES = 0
PCIE_UTIL_RX_BYTES = 1

# Bits of nvmlDeviceGetCurrentClocksEventReasons (formerly ...ThrottleReasons).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}

# nvmlDeviceGetTopologyCommonAncestor levels, named as nvidia-smi topo -m does.
TOPOLOGY_LEVELS = {0: "internal", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

# Variables worth keeping besides NCCL_* and CUDA_*: they change how ranks bind and talk.
EXTRA_ENV_PREFIXES = ("TORCH_NCCL_", "TORCH_DISTRIBUTED_", "UCX_", "FI_")
EXTRA_ENV_NAMES = (
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVSHMEM_DISABLE_NVLS",
)


def snapshot(
    *,
    proc: Path = Path("/proc"),
    sys: Path = Path("/sys"),
    nvml: Any = None,
    env: Mapping[str, str] = os.environ,
    etc: Path = Path("/etc"),
    dev: Path = Path("/dev"),
) -> dict[str, Any]:
    """Gather the machine's facts without changing anything.

    Args:
        proc, sys, etc, dev: roots to read instead of ``/proc``, ``/sys``, ``/etc``, ``/dev``.
            With a ``proc`` other than ``/proc`` the CPU affinity and the locked-memory
            limit come from ``proc/self/status`` and ``proc/self/limits`` instead of the
            live process, so a fake tree describes a whole process.
        nvml: an object with pynvml's functions (``nvmlInit``, ``nvmlDeviceGetCount`` ...);
            ``None`` imports ``pynvml`` and skips the GPUs when that fails.
        env: the environment to read variables from.

    Returns:
        a JSON-ready dict with keys ``collected_ns``, ``host``, ``platform``, ``process``,
        ``cpu``, ``numa``, ``memory``, ``infiniband``, ``env``, ``nccl_conf``, ``mps``,
        ``gpus`` and ``errors`` (list of "where: what went wrong" strings).
    """
    errors: list[str] = []
    env = dict(env)
    facts: dict[str, Any] = {
        "collected_ns": time.time_ns(),
        "host": socket.gethostname(),
        "platform": {
            "kernel": platform.release(),
            "machine": platform.machine(),
            "python": platform.python_version(),
        },
    }
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("process", lambda: _process(proc, env)),
        ("cpu", lambda: _cpu(proc, sys)),
        ("numa", lambda: _numa(sys)),
        ("memory", lambda: _memory(proc, sys, dev)),
        ("infiniband", lambda: _infiniband(proc, sys)),
        ("env", lambda: _env(env)),
        ("nccl_conf", lambda: _nccl_conf(env, etc)),
        ("mps", lambda: _mps(proc, env)),
        ("gpus", lambda: _gpus(nvml, sys)),
    ]
    for key, step in steps:
        # One unreadable area must not cost the rest of the snapshot.
        try:
            facts[key] = step()
        except Exception as e:  # noqa: BLE001 - a snapshot never fails as a whole
            facts[key] = None
            errors.append(f"{key}: {type(e).__name__}: {e}")
    facts["errors"] = errors
    return facts


# -- small readers ----------------------------------------------------------------------
def read_text(path: Path) -> str | None:
    """Return the stripped contents of ``path``, or None when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    """Return ``path``'s contents as an int, or None when absent or not a number."""
    text = read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_cpulist(text: str | None) -> list[int]:
    """Parse a kernel CPU/node list such as ``0-3,8,10-11`` into sorted ints."""
    out: set[int] = set()
    for part in (text or "").replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    return sorted(out)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format ints as a kernel CPU list (``0-3,8``); the inverse of :func:`parse_cpulist`."""
    items = sorted(set(cpus))
    ranges: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        ranges.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(ranges)


def _status_fields(proc: Path) -> dict[str, str]:
    text = read_text(proc / "self" / "status") or ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _bracketed(text: str | None) -> str | None:
    """Return the selected word of a sysfs choice file (``always [madvise] never``)."""
    if text is None:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip() or None


# -- areas ------------------------------------------------------------------------------
def _process(proc: Path, env: Mapping[str, str]) -> dict[str, Any]:
    status = _status_fields(proc)
    cpus: str | None
    pid: int | None
    if proc == REAL_PROC and hasattr(os, "sched_getaffinity"):
        cpus = format_cpulist(os.sched_getaffinity(0))
        pid = os.getpid()
    else:
        cpus = status.get("Cpus_allowed_list")
        pid = int(status["Pid"]) if status.get("Pid", "").isdigit() else None
    return {
        "pid": pid,
        "cpu_affinity": cpus,
        "mems_allowed": status.get("Mems_allowed_list"),
        "local_rank": _int_or_none(env.get("LOCAL_RANK")),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
    }


def _cpu(proc: Path, sys: Path) -> dict[str, Any]:
    cpu_root = sys / "devices" / "system" / "cpu"
    governors: dict[str, int] = {}
    drivers: dict[str, int] = {}
    online = parse_cpulist(read_text(cpu_root / "online"))
    count = 0
    for d in sorted(cpu_root.glob("cpu[0-9]*")):
        count += 1
        gov = read_text(d / "cpufreq" / "scaling_governor")
        if gov:
            governors[gov] = governors.get(gov, 0) + 1
        drv = read_text(d / "cpufreq" / "scaling_driver")
        if drv:
            drivers[drv] = drivers.get(drv, 0) + 1
    return {
        "count": len(online) or count or os.cpu_count(),
        "governors": governors,
        "scaling_drivers": drivers,
        "numa_balancing": read_int(proc / "sys" / "kernel" / "numa_balancing"),
    }


def _numa(sys: Path) -> dict[str, Any]:
    nodes = []
    root = sys / "devices" / "system" / "node"
    for d in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        mem_kb = None
        for line in (read_text(d / "meminfo") or "").splitlines():
            if "MemTotal:" in line:
                mem_kb = _int_or_none(line.split("MemTotal:")[1].split()[0])
        nodes.append({"id": int(d.name[4:]), "cpus": read_text(d / "cpulist"), "mem_total_bytes": mem_kb * 1024 if mem_kb else None})
    return {"nodes": nodes}


def _memory(proc: Path, sys: Path, dev: Path) -> dict[str, Any]:
    thp = sys / "kernel" / "mm" / "transparent_hugepage"
    shm: dict[str, Any] | None = None
    try:
        st = os.statvfs(dev / "shm")
        shm = {"path": str(dev / "shm"), "total_bytes": st.f_frsize * st.f_blocks, "free_bytes": st.f_frsize * st.f_bavail}
    except OSError as e:
        shm = {"path": str(dev / "shm"), "total_bytes": None, "free_bytes": None, "error": e.strerror}
    return {
        "thp_enabled": _bracketed(read_text(thp / "enabled")),
        "thp_defrag": _bracketed(read_text(thp / "defrag")),
        "shm": shm,
        "memlock": _memlock(proc),
    }


def _memlock(proc: Path) -> dict[str, int | None]:
    """Return the locked-memory limit as {soft_bytes, hard_bytes}; -1 means unlimited."""
    if proc == REAL_PROC:
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        norm = lambda v: -1 if v == resource.RLIM_INFINITY else int(v)  # noqa: E731
        return {"soft_bytes": norm(soft), "hard_bytes": norm(hard)}
    for line in (read_text(proc / "self" / "limits") or "").splitlines():
        if line.startswith("Max locked memory"):
            parts = line[len("Max locked memory"):].split()
            norm2 = lambda v: -1 if v == "unlimited" else int(v)  # noqa: E731
            return {"soft_bytes": norm2(parts[0]), "hard_bytes": norm2(parts[1])}
    return {"soft_bytes": None, "hard_bytes": None}


def _loaded_modules(proc: Path) -> list[str]:
    return [line.split()[0] for line in (read_text(proc / "modules") or "").splitlines() if line.strip()]


def _infiniband(proc: Path, sys: Path) -> dict[str, Any]:
    devices = []
    root = sys / "class" / "infiniband"
    for d in sorted(root.glob("*")):
        ports = []
        for p in sorted((d / "ports").glob("*"), key=lambda q: _int_or_none(q.name) or 0):
            ports.append({
                "port": _int_or_none(p.name),
                "state": read_text(p / "state"),
                "phys_state": read_text(p / "phys_state"),
                "rate": read_text(p / "rate"),
                "link_layer": read_text(p / "link_layer"),
            })
        devices.append({"name": d.name, "numa_node": read_int(d / "device" / "numa_node"), "ports": ports})
    modules = _loaded_modules(proc)
    wanted = ("nvidia_peermem", "nv_peer_mem", "ib_core", "mlx5_core", "nvidia", "gdrdrv", "ib_uverbs")
    return {
        "devices": devices,
        "modules_readable": (proc / "modules").exists(),
        "modules": [m for m in modules if m in wanted],
        "peermem_module": next((m for m in modules if m in ("nvidia_peermem", "nv_peer_mem")), None),
    }


def _env(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    return {
        "nccl": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")},
        "cuda": {k: v for k, v in sorted(env.items()) if k.startswith("CUDA_")},
        "other": {
            k: v for k, v in sorted(env.items())
            if k in EXTRA_ENV_NAMES or k.startswith(EXTRA_ENV_PREFIXES)
        },
    }


def parse_nccl_conf(text: str) -> tuple[dict[str, str], list[str]]:
    """Parse an ``nccl.conf`` exactly as NCCL does (``src/misc/param.cc``).

    NCCL skips lines starting with ``#`` and lines without ``=``, and does not trim either
    side: ``NCCL_DEBUG = INFO`` sets a variable named ``"NCCL_DEBUG "``.

    Returns:
        (settings {name: value} in file order, problems: one line per suspicious line).
    """
    settings: dict[str, str] = {}
    problems: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            if line.strip():
                problems.append(f"line {n}: no '=' ({line.strip()[:40]!r}); NCCL ignores it")
            continue
        if key != key.strip() or value != value.strip():
            problems.append(f"line {n}: spaces around {key.strip()!r}; NCCL keeps them, so the setting is lost or its value is wrong")
        settings[key] = value
    return settings, problems


def _nccl_conf(env: Mapping[str, str], etc: Path) -> list[dict[str, Any]]:
    """Return the conf files NCCL would read, in its order (first one wins, env beats both)."""
    paths: list[tuple[str, Path]] = []
    if env.get("NCCL_CONF_FILE"):
        paths.append(("NCCL_CONF_FILE", Path(env["NCCL_CONF_FILE"])))
    elif env.get("HOME"):
        paths.append(("~/.nccl.conf", Path(env["HOME"]) / ".nccl.conf"))
    paths.append(("/etc/nccl.conf", etc / "nccl.conf"))
    out = []
    for source, path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            out.append({"source": source, "path": str(path), "exists": False, "settings": {}, "problems": []})
            continue
        except OSError as e:
            out.append({"source": source, "path": str(path), "exists": True, "settings": {}, "problems": [f"unreadable: {e.strerror}"]})
            continue
        settings, problems = parse_nccl_conf(text)
        out.append({"source": source, "path": str(path), "exists": True, "settings": settings, "problems": problems})
    return out


def _mps(proc: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """MPS in use: its daemons among the processes we can see, and its pipe directory."""
    daemons: list[str] = []
    for d in proc.glob("[0-9]*"):
        comm = read_text(d / "comm")
        if comm in ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"):
            daemons.append(comm)
    pipe_dir = Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
    return {
        "daemons": sorted(set(daemons)),
        "pipe_directory": str(pipe_dir),
        "control_pipe": (pipe_dir / "control").exists(),
        "active_thread_percentage": env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
    }


# -- GPUs (NVML) ------------------------------------------------------------------------
def load_nvml(nvml: Any = None) -> tuple[Any, str | None]:
    """Return (an initialised NVML module, None) or (None, the reason it is unavailable)."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded ...
        return None, f"NVML cannot start ({type(e).__name__}: {e}): no NVIDIA driver or GPU visible here"
    return nvml, None


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


class _Query:
    """Calls NVML functions, turning 'not supported'/'no permission' into None plus a note."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.errors: dict[str, str] = {}

    def __call__(self, key: str, fn_name: str, *args: Any) -> Any:
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            self.errors[key] = f"{fn_name} missing from this nvidia-ml-py"
            return None
        try:
            return _text(fn(*args))
        except Exception as e:  # noqa: BLE001 - NVMLError_NotSupported and friends
            self.errors[key] = f"{type(e).__name__}: {e}".strip()
            return None


def _gpus(nvml: Any, sys: Path) -> dict[str, Any]:
    mod, reason = load_nvml(nvml)
    if mod is None:
        return {"available": False, "reason": reason, "devices": []}
    try:
        q = _Query(mod)
        cuda = q("cuda_driver_version", "nvmlSystemGetCudaDriverVersion_v2") or q("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
        count = q("count", "nvmlDeviceGetCount") or 0
        devices = []
        handles = []
        for i in range(count):
            h = q(f"handle{i}", "nvmlDeviceGetHandleByIndex", i)
            handles.append(h)
            if h is not None:
                devices.append(_device(mod, i, h, sys))
        out = {
            "available": count > 0,
            "reason": None if count else "NVML sees no GPU",
            "driver_version": q("driver_version", "nvmlSystemGetDriverVersion"),
            "cuda_driver_version": _cuda_version(cuda),
            "nvml_version": q("nvml_version", "nvmlSystemGetNVMLVersion"),
            "count": count,
            "devices": devices,
            "topology": _topology(q, handles),
            "errors": q.errors,
        }
        return out
    finally:
        try:
            mod.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a fake or half-started NVML
            pass


def _cuda_version(v: Any) -> str | None:
    """NVML reports CUDA as 12040 for 12.4."""
    if not isinstance(v, int):
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


def _device(nvml: Any, index: int, h: Any, sys: Path) -> dict[str, Any]:
    q = _Query(nvml)
    pci = q("pci", "nvmlDeviceGetPciInfo", h)
    throttle = q("throttle_reasons", "nvmlDeviceGetCurrentClocksEventReasons", h)
    if throttle is None:
        throttle = q("throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        if throttle is not None:
            q.errors.pop("throttle_reasons", None)
    mem = q("memory", "nvmlDeviceGetMemoryInfo", h)
    util = q("utilization", "nvmlDeviceGetUtilizationRates", h)
    power = q("power", "nvmlDeviceGetPowerUsage", h)
    limit = q("power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
    default_limit = q("default_power_limit", "nvmlDeviceGetPowerManagementDefaultLimit", h)
    pm = q("persistence_mode", "nvmlDeviceGetPersistenceMode", h)
    cm = q("compute_mode", "nvmlDeviceGetComputeMode", h)
    mig = q("mig_mode", "nvmlDeviceGetMigMode", h)
    cpu_count = os.cpu_count() or 64
    mask = q("cpu_affinity", "nvmlDeviceGetCpuAffinity", h, (cpu_count + 63) // 64)
    info = {
        "index": index,
        "name": q("name", "nvmlDeviceGetName", h),
        "uuid": q("uuid", "nvmlDeviceGetUUID", h),
        "pci_bus_id": _text(getattr(pci, "busId", None)) if pci is not None else None,
        "persistence_mode": None if pm is None else bool(pm),
        "compute_mode": COMPUTE_MODES.get(cm, str(cm)) if cm is not None else None,
        "mig_mode": mig[0] if isinstance(mig, (list, tuple)) and mig else mig,
        "clocks": {
            "sm_mhz": q("sm_mhz", "nvmlDeviceGetClockInfo", h, CLOCK_SM),
            "mem_mhz": q("mem_mhz", "nvmlDeviceGetClockInfo", h, CLOCK_MEM),
            "max_sm_mhz": q("max_sm_mhz", "nvmlDeviceGetMaxClockInfo", h, CLOCK_SM),
            "max_mem_mhz": q("max_mem_mhz", "nvmlDeviceGetMaxClockInfo", h, CLOCK_MEM),
            "app_sm_mhz": q("app_sm_mhz", "nvmlDeviceGetApplicationsClock", h, CLOCK_SM),
            "app_mem_mhz": q("app_mem_mhz", "nvmlDeviceGetApplicationsClock", h, CLOCK_MEM),
            "default_app_sm_mhz": q("default_app_sm_mhz", "nvmlDeviceGetDefaultApplicationsClock", h, CLOCK_SM),
            "default_app_mem_mhz": q("default_app_mem_mhz", "nvmlDeviceGetDefaultApplicationsClock", h, CLOCK_MEM),
        },
        "throttle_reasons": throttle,
        "throttle_reason_names": throttle_names(throttle),
        "pcie": {
            "gen": q("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", h),
            "max_gen": q("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", h),
            "gpu_max_gen": q("pcie_gpu_max_gen", "nvmlDeviceGetGpuMaxPcieLinkGeneration", h),
            "width": q("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", h),
            "max_width": q("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", h),
        },
        "numa_node": q("numa_node", "nvmlDeviceGetNumaNodeId", h),
        "cpu_affinity": _mask_to_cpulist(mask),
        "memory_total_bytes": getattr(mem, "total", None),
        "memory_used_bytes": getattr(mem, "used", None),
        "sm_util_pct": getattr(util, "gpu", None),
        "mem_util_pct": getattr(util, "memory", None),
        "power_w": power / 1000 if isinstance(power, (int, float)) else None,
        "power_limit_w": limit / 1000 if isinstance(limit, (int, float)) else None,
        "default_power_limit_w": default_limit / 1000 if isinstance(default_limit, (int, float)) else None,
        "temp_c": q("temp_c", "nvmlDeviceGetTemperature", h, TEMPERATURE_GPU),
        "nvlink_active": _nvlinks(q, h),
    }
    info["numa_node_source"] = "nvml" if info["numa_node"] is not None else None
    if info["numa_node"] is None and info["pci_bus_id"]:
        # Older drivers and some VMs do not answer nvmlDeviceGetNumaNodeId; the kernel knows.
        node = read_int(sys / "bus" / "pci" / "devices" / sysfs_bus_id(info["pci_bus_id"]) / "numa_node")
        if node is not None:
            info["numa_node"], info["numa_node_source"] = node, "sysfs"
    info["errors"] = q.errors
    return info


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` (8-digit domain, upper case) as sysfs names it: ``0000:18:00.0``."""
    domain, _, rest = nvml_bus_id.partition(":")
    return f"{domain[-4:]}:{rest}".lower()


def throttle_names(mask: int | None) -> list[str]:
    """Return the names of the bits set in a clocks-event (throttle) reasons mask."""
    if not isinstance(mask, int):
        return []
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def _mask_to_cpulist(mask: Any) -> str | None:
    """NVML returns the affinity as 64-bit words, CPU 0 in bit 0 of word 0."""
    if mask is None:
        return None
    cpus = [w * 64 + b for w, word in enumerate(mask) for b in range(64) if int(word) >> b & 1]
    return format_cpulist(cpus)


def _nvlinks(q: _Query, h: Any) -> int | None:
    active = 0
    for link in range(18):  # NVML_NVLINK_MAX_LINKS on Hopper
        state = q("nvlink", "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            break
        active += int(bool(state))
    if active == 0 and "nvlink" in q.errors:
        # "not supported" on link 0 means no NVLink at all, which is a fact, not an error.
        q.errors.pop("nvlink")
        return 0
    q.errors.pop("nvlink", None)
    return active


def _topology(q: _Query, handles: list[Any]) -> list[dict[str, Any]]:
    pairs = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            if handles[i] is None or handles[j] is None:
                continue
            level = q("topology", "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
            pairs.append({"gpus": [i, j], "level": TOPOLOGY_LEVELS.get(level, level) if level is not None else None})
    return pairs


def _int_or_none(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
