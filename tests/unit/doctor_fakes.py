"""Fakes for the doctor and NVML sampler tests: an NVML module answering from a fixture, and
builders of tiny fake /proc, /sys, /etc and /dev trees."""
from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "doctor"


def nvml_spec(name: str = "nvml_two_gpus.json") -> dict[str, Any]:
    """Return a fresh copy of an NVML answers fixture."""
    return copy.deepcopy(json.loads((DATA / name).read_text()))


class FakeNVMLError(Exception):
    """Stands in for pynvml.NVMLError (NotSupported and friends)."""


class FakeNvml:
    """A pynvml look-alike: handles are device indices, answers come from ``spec``.

    A device field that is missing or None raises FakeNVMLError("Not Supported"), like a
    GPU that does not support the query.  ``calls`` counts calls per function.
    """

    def __init__(self, spec: dict[str, Any] | None = None, *, fail_init: str | None = None) -> None:
        self.spec = spec if spec is not None else nvml_spec()
        self.fail_init = fail_init
        self.calls: Counter[str] = Counter()
        self.initialised = 0

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml"):
            object.__getattribute__(self, "calls")[name] += 1
        return object.__getattribute__(self, name)

    def _dev(self, h: int, key: str) -> Any:
        value = self.spec["devices"][h].get(key)
        if value is None:
            raise FakeNVMLError("Not Supported")
        return value

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNVMLError(self.fail_init)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.spec["driver_version"]

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.spec["cuda_driver_version"]

    def nvmlSystemGetNVMLVersion(self) -> str:
        return self.spec["nvml_version"]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.spec["devices"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if not 0 <= i < len(self.spec["devices"]):
            raise FakeNVMLError("Invalid Argument")
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._dev(h, "name")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._dev(h, "uuid")

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._dev(h, "bus_id").encode())

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return self._dev(h, "persistence_mode")

    def nvmlDeviceGetComputeMode(self, h: int) -> int:
        return self._dev(h, "compute_mode")

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return [self._dev(h, "mig_mode"), self._dev(h, "mig_mode")]

    def nvmlDeviceGetClockInfo(self, h: int, t: int) -> int:
        return self._dev(h, {1: "sm_mhz", 2: "mem_mhz"}[t])

    def nvmlDeviceGetMaxClockInfo(self, h: int, t: int) -> int:
        return self._dev(h, {1: "max_sm_mhz", 2: "max_mem_mhz"}[t])

    def nvmlDeviceGetApplicationsClock(self, h: int, t: int) -> int:
        return self._dev(h, {1: "app_sm_mhz", 2: "app_mem_mhz"}[t])

    def nvmlDeviceGetDefaultApplicationsClock(self, h: int, t: int) -> int:
        return self._dev(h, {1: "default_app_sm_mhz", 2: "default_app_mem_mhz"}[t])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._dev(h, "throttle_reasons")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._dev(h, "pcie_gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._dev(h, "pcie_max_gen")

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: int) -> int:
        return self._dev(h, "pcie_gpu_max_gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._dev(h, "pcie_width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._dev(h, "pcie_max_width")

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        return self._dev(h, "numa_node")

    def nvmlDeviceGetCpuAffinity(self, h: int, words: int) -> list[int]:
        from perfscope.collectors.host.environment import parse_cpulist

        mask = [0] * words
        for cpu in parse_cpulist(self._dev(h, "cpu_affinity")):
            mask[cpu // 64] |= 1 << (cpu % 64)
        return mask

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        total, used = self._dev(h, "memory_total"), self._dev(h, "memory_used")
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self._dev(h, "util_gpu"), memory=self._dev(h, "util_memory"))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._dev(h, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._dev(h, "power_limit_mw")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return self._dev(h, "default_power_limit_mw")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._dev(h, "temp_c")

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= self._dev(h, "nvlink_links"):
            raise FakeNVMLError("Invalid Argument")
        return int(link < self._dev(h, "nvlink_active"))

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return self.spec["topology_level"]

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        return self._dev(h, "pcie_tx_kbs" if counter == 0 else "pcie_rx_kbs")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_tree(
    root: Path,
    *,
    nodes: dict[int, str] | None = None,
    governors: list[str] | None = None,
    numa_balancing: int | None = 0,
    thp: str | None = "always [madvise] never",
    defrag: str | None = "always defer [defer+madvise] madvise never",
    cpus_allowed: str = "0-3",
    mems_allowed: str = "0",
    memlock: str = "unlimited",
    ib_ports: dict[str, str] | None = None,
    modules: list[str] | None = None,
    nccl_conf: str | None = None,
    mps_daemon: bool = False,
) -> dict[str, Path]:
    """Build fake /proc, /sys, /etc and /dev roots under ``root``.

    Returns:
        keyword arguments for ``snapshot`` (``proc``, ``sys``, ``etc``, ``dev``).
    """
    proc, sys_, etc, dev = root / "proc", root / "sys", root / "etc", root / "dev"
    nodes = {0: "0-3", 1: "4-7"} if nodes is None else nodes
    governors = ["performance"] * 8 if governors is None else governors
    _write(proc / "self" / "status", f"Name:\tpython\nPid:\t4242\nCpus_allowed_list:\t{cpus_allowed}\nMems_allowed_list:\t{mems_allowed}\n")
    limit = memlock if memlock == "unlimited" else str(int(memlock))
    _write(proc / "self" / "limits", "Limit                     Soft Limit           Hard Limit           Units\n"
           f"Max locked memory         {limit:<20} {limit:<20} bytes\n")
    if numa_balancing is not None:
        _write(proc / "sys" / "kernel" / "numa_balancing", f"{numa_balancing}\n")
    if modules is not None:
        _write(proc / "modules", "".join(f"{m} 16384 0 - Live 0x0000000000000000\n" for m in modules))
    if mps_daemon:
        _write(proc / "777" / "comm", "nvidia-cuda-mps-control\n")
    _write(proc / "1" / "comm", "init\n")
    cpu = sys_ / "devices" / "system" / "cpu"
    _write(cpu / "online", f"0-{max(len(governors), 1) - 1}\n")
    for i, g in enumerate(governors):
        _write(cpu / f"cpu{i}" / "cpufreq" / "scaling_governor", g + "\n")
    for n, cpulist in nodes.items():
        _write(sys_ / "devices" / "system" / "node" / f"node{n}" / "cpulist", cpulist + "\n")
        _write(sys_ / "devices" / "system" / "node" / f"node{n}" / "meminfo", f"Node {n} MemTotal:       1048576 kB\n")
    if thp is not None:
        _write(sys_ / "kernel" / "mm" / "transparent_hugepage" / "enabled", thp + "\n")
    if defrag is not None:
        _write(sys_ / "kernel" / "mm" / "transparent_hugepage" / "defrag", defrag + "\n")
    for name, state in (ib_ports or {}).items():
        port = sys_ / "class" / "infiniband" / name / "ports" / "1"
        _write(port / "state", state + "\n")
        _write(port / "rate", "400 Gb/sec (4X NDR)\n")
        _write(port / "link_layer", "InfiniBand\n")
        _write(sys_ / "class" / "infiniband" / name / "device" / "numa_node", "0\n")
    etc.mkdir(parents=True, exist_ok=True)
    if nccl_conf is not None:
        _write(etc / "nccl.conf", nccl_conf)
    (dev / "shm").mkdir(parents=True, exist_ok=True)
    return {"proc": proc, "sys": sys_, "etc": etc, "dev": dev}
