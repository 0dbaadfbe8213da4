"""Every doctor check, pass/warn/fail/skip, over snapshots of fake machines."""
from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from doctor_fakes import FakeNvml, make_tree

from perfscope.collectors.host.checks import CHECK_IDS, CHECKS, STATUSES, run_checks, summarize
from perfscope.collectors.host.environment import snapshot

Facts = dict[str, Any]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Facts:
    """A well-tuned two-socket, two-GPU node with InfiniBand: every check passes."""
    root = tmp_path_factory.mktemp("healthy")
    roots = make_tree(root, ib_ports={"mlx5_0": "4: ACTIVE"}, modules=["nvidia", "nvidia_peermem", "ib_core"])
    facts = snapshot(nvml=FakeNvml(), env={"HOME": str(root / "home"), "LOCAL_RANK": "0"}, **roots)
    facts["memory"]["shm"] = {"path": "/dev/shm", "total_bytes": 64 << 30, "free_bytes": 60 << 30}
    return facts


def by_id(facts: Facts) -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in run_checks(facts)}


def test_healthy_machine_passes_everything(healthy: Facts) -> None:
    results = run_checks(healthy)
    assert [r["id"] for r in results] == list(CHECK_IDS)
    assert len(CHECKS) == len(CHECK_IDS) >= 10
    bad = [r for r in results if r["status"] != "pass"]
    assert bad == [], bad
    for r in results:
        assert set(r) == {"id", "status", "message", "fix"}
        assert "\n" not in r["message"] and r["message"]


def test_no_gpu_skips_gpu_checks_with_reason(tmp_path: Path) -> None:
    facts = snapshot(nvml=FakeNvml(fail_init="NVML Shared Library Not Found"), env={}, **make_tree(tmp_path))
    results = by_id(facts)
    for cid in ("gpu.driver", "gpu.persistence", "gpu.throttle", "gpu.clocks", "gpu.pcie", "numa.gpu_affinity", "numa.process_binding", "gpu.mps"):
        assert results[cid]["status"] == "skip", cid
        assert results[cid]["message"]
    assert "NVML Shared Library Not Found" in results["gpu.driver"]["message"]
    assert results["memory.thp"]["status"] == "pass"  # host checks still run


def test_broken_facts_never_raise() -> None:
    results = run_checks({"gpus": {"devices": [{"index": 0, "clocks": "garbage", "pcie": 7}]}, "memory": 3})
    assert len(results) == len(CHECK_IDS)
    assert {r["status"] for r in results} <= set(STATUSES)
    assert sum(summarize(results).values()) == len(CHECK_IDS)


def _dev(i: int = 0) -> Callable[[Facts], dict[str, Any]]:
    return lambda f: f["gpus"]["devices"][i]


def _set(path: str, value: Any) -> Callable[[Facts], None]:
    """Return a mutation that sets facts[a][b]... = value (int parts index lists)."""

    def mutate(f: Facts) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        target: Any = f
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return mutate


def _both(*mutations: Callable[[Facts], None]) -> Callable[[Facts], None]:
    def mutate(f: Facts) -> None:
        for m in mutations:
            m(f)

    return mutate


def _nccl(env: dict[str, str] | None = None, conf: dict[str, str] | None = None, ib: bool = True) -> Callable[[Facts], None]:
    def mutate(f: Facts) -> None:
        f["env"]["nccl"] = dict(env or {})
        f["nccl_conf"] = [{"source": "/etc/nccl.conf", "path": "/etc/nccl.conf", "exists": bool(conf), "settings": dict(conf or {}), "problems": []}]
        if not ib:
            f["infiniband"]["devices"] = []

    return mutate


CASES: list[tuple[str, str, Callable[[Facts], None], str]] = [
    # (check id, status expected, mutation of the healthy facts, text the message holds)
    ("gpu.driver", "skip", _set("gpus", {"available": False, "reason": "no driver", "devices": []}), "no driver"),
    ("gpu.persistence", "warn", _set("gpus.devices.1.persistence_mode", False), "GPU1"),
    ("gpu.persistence", "skip", _both(_set("gpus.devices.0.persistence_mode", None), _set("gpus.devices.1.persistence_mode", None)), "does not report"),
    ("gpu.throttle", "fail", _both(_set("gpus.devices.0.throttle_reasons", 0x40), _set("gpus.devices.0.throttle_reason_names", ["hw_thermal_slowdown"])), "hw_thermal_slowdown"),
    ("gpu.throttle", "warn", _both(_set("gpus.devices.1.throttle_reasons", 0x4), _set("gpus.devices.1.throttle_reason_names", ["sw_power_cap"])), "sw_power_cap"),
    ("gpu.throttle", "skip", _both(_set("gpus.devices.0.throttle_reasons", None), _set("gpus.devices.1.throttle_reasons", None)), "throttle"),
    ("gpu.clocks", "warn", _set("gpus.devices.0.clocks.app_sm_mhz", 1200), "1200"),
    ("gpu.clocks", "skip", _both(*[_set(f"gpus.devices.{i}.clocks", {}) for i in (0, 1)]), "clocks"),
    ("gpu.power_limit", "warn", _set("gpus.devices.0.power_limit_w", 400.0), "400 W"),
    ("gpu.power_limit", "skip", _both(*[_set(f"gpus.devices.{i}.power_limit_w", None) for i in (0, 1)]), "power"),
    ("gpu.pcie", "fail", _set("gpus.devices.0.pcie.width", 8), "x8 of x16"),
    ("gpu.pcie", "warn", _both(_set("gpus.devices.0.throttle_reason_names", []), _set("gpus.devices.0.sm_util_pct", 90), _set("gpus.devices.0.pcie.gen", 3)), "Gen3 of Gen5 under load"),
    ("gpu.pcie", "warn", _set("gpus.devices.1.pcie.max_gen", 4), "slot allows Gen4"),
    ("gpu.pcie", "skip", _both(*[_set(f"gpus.devices.{i}.pcie", {}) for i in (0, 1)]), "PCIe"),
    ("gpu.topology", "warn", _both(*[_set(f"gpus.devices.{i}.nvlink_active", 0) for i in (0, 1)]), "GPU0-GPU1 SYS"),
    ("gpu.topology", "skip", _set("gpus.devices", [{"index": 0}]), "one GPU"),
    ("gpu.mps", "warn", _set("mps.daemons", ["nvidia-cuda-mps-control"]), "MPS is running"),
    ("gpu.mps", "warn", _set("mps.control_pipe", True), "control pipe"),
    ("gpu.mps", "fail", _set("gpus.devices.0.compute_mode", "prohibited"), "prohibited"),
    ("numa.gpu_affinity", "warn", _set("gpus.devices.1.numa_node", -1), "GPU1"),
    ("numa.gpu_affinity", "pass", _set("numa.nodes", [{"id": 0, "cpus": "0-7"}]), "one NUMA node"),
    ("numa.process_binding", "warn", _set("process.cpu_affinity", "0-7"), "may run on any of CPUs 0-7"),
    ("numa.process_binding", "fail", _set("process.cpu_affinity", "4-7"), "all remote"),
    ("numa.process_binding", "fail", _set("process.mems_allowed", "1"), "memory bound to node(s) 1"),
    ("numa.process_binding", "warn", _set("process.mems_allowed", "0-1"), "memory may come from nodes 0-1"),
    ("numa.process_binding", "skip", _set("process.local_rank", None), "no particular GPU"),
    ("numa.process_binding", "fail", _both(_set("process.local_rank", 1), _set("process.cpu_affinity", "0-3")), "GPU1 (node 1)"),
    ("numa.process_binding", "pass", _both(_set("process.local_rank", 0), _set("process.cuda_visible_devices", "1"), _set("process.cpu_affinity", "4-7"), _set("process.mems_allowed", "1")), "GPU1's node 1"),
    ("cpu.governor", "warn", _set("cpu.governors", {"performance": 4, "powersave": 4}), "4 CPU(s) powersave"),
    ("cpu.governor", "skip", _set("cpu.governors", {}), "no cpufreq"),
    ("kernel.numa_balancing", "warn", _set("cpu.numa_balancing", 1), "on (2 nodes)"),
    ("kernel.numa_balancing", "pass", _both(_set("cpu.numa_balancing", 1), _set("numa.nodes", [{"id": 0}])), "harmless"),
    ("kernel.numa_balancing", "skip", _set("cpu.numa_balancing", None), "not readable"),
    ("memory.thp", "warn", _set("memory.thp_enabled", "never"), "disabled"),
    ("memory.thp", "warn", _set("memory.thp_defrag", "always"), "defrag=always"),
    ("memory.thp", "skip", _set("memory.thp_enabled", None), "not readable"),
    ("memory.shm", "fail", _set("memory.shm", {"total_bytes": 64 << 20, "free_bytes": 64 << 20}), "64 MiB"),
    ("memory.shm", "warn", _set("memory.shm", {"total_bytes": 512 << 20, "free_bytes": 500 << 20}), "512 MiB"),
    ("memory.shm", "skip", _set("memory.shm", {"path": "/dev/shm", "total_bytes": None, "error": "No such file or directory"}), "not mounted"),
    ("rdma.memlock", "fail", _set("memory.memlock", {"soft_bytes": 64 << 10, "hard_bytes": 64 << 10}), "64 KiB"),
    ("rdma.memlock", "pass", _both(_set("memory.memlock", {"soft_bytes": 8 << 20}), _set("infiniband.devices", [])), "no RDMA device"),
    ("rdma.memlock", "skip", _set("memory.memlock", {"soft_bytes": None}), "not readable"),
    ("rdma.devices", "warn", _set("infiniband.devices", [{"name": "mlx5_1", "ports": [{"port": 1, "state": "1: DOWN"}]}]), "mlx5_1:1 1: DOWN"),
    ("rdma.devices", "skip", _set("infiniband.devices", []), "TCP sockets"),
    ("rdma.gpudirect", "warn", _set("infiniband.peermem_module", None), "nvidia_peermem is not loaded"),
    ("rdma.gpudirect", "skip", _set("infiniband.devices", []), "no RDMA devices"),
    ("rdma.gpudirect", "skip", _set("infiniband.modules_readable", False), "/proc/modules"),
    ("nccl.names", "warn", _nccl({"NCCL_DEBGU": "INFO"}), "did you mean NCCL_DEBUG"),
    ("nccl.names", "warn", _nccl({"NCCL_IB_GDR_LEVEL": "PHB"}), "now NCCL_NET_GDR_LEVEL"),
    ("nccl.names", "warn", _nccl(conf={"NCCL_SOKET_IFNAME": "eth0"}), "NCCL_SOKET_IFNAME"),
    ("nccl.names", "pass", _nccl({"NCCL_DEBUG": "WARN", "NCCL_VERSION": "2.27.3"}), "all known"),
    ("nccl.values", "fail", _nccl({"NCCL_P2P_DISABLE": "1"}), "NCCL_P2P_DISABLE=1"),
    ("nccl.values", "fail", _nccl({"NCCL_IB_DISABLE": "1"}), "RDMA devices are present"),
    ("nccl.values", "pass", _nccl({"NCCL_IB_DISABLE": "1"}, ib=False), "no risky"),
    ("nccl.values", "warn", _nccl({"NCCL_DEBUG": "TRACE"}), "TRACE"),
    ("nccl.values", "warn", _nccl({"NCCL_NVLS_ENABLE": "1"}), "NVLink SHARP"),
    ("nccl.values", "warn", _nccl({"NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": "NVLS,Ring"}), "asks for NVLS"),
    ("nccl.values", "pass", _nccl({"NCCL_NVLS_ENABLE": "0"}), "NCCL_NVLS_ENABLE=0"),
    ("nccl.values", "fail", _nccl({"NCCL_MIN_CTAS": "32", "NCCL_MAX_CTAS": "8"}), "NCCL_MIN_CTAS=32 > NCCL_MAX_CTAS=8"),
    ("nccl.values", "warn", _nccl(conf={"NCCL_PROTO": "Simple"}), "from /etc/nccl.conf"),
    ("nccl.values", "warn", _nccl({"NCCL_DEBUG_SUBSYS": "INIT"}), "without NCCL_DEBUG"),
    ("nccl.values", "warn", _nccl({"NCCL_SOCKET_IFNAME": "lo"}), "loopback"),
    ("nccl.values", "warn", _nccl({"NCCL_IB_HCA": "mlx5"}, ib=False), "no RDMA devices"),
    ("nccl.values", "pass", _nccl({"NCCL_DEBUG": "WARN"}, conf={"NCCL_DEBUG": "TRACE"}), "NCCL_DEBUG=WARN"),
    ("nccl.conf", "warn", _set("nccl_conf", [{"source": "NCCL_CONF_FILE", "path": "/x.conf", "exists": False, "settings": {}, "problems": []}]), "does not exist"),
    ("nccl.conf", "warn", _set("nccl_conf", [{"source": "/etc/nccl.conf", "path": "/etc/nccl.conf", "exists": True, "settings": {"NCCL_DEBUG ": " INFO"}, "problems": ["line 1: spaces around 'NCCL_DEBUG'"]}]), "spaces"),
    ("nccl.conf", "pass", _both(_nccl({"NCCL_DEBUG": "WARN"}, conf={"NCCL_DEBUG": "INFO"})), "environment overrides NCCL_DEBUG"),
    ("nccl.conf", "skip", _set("nccl_conf", None), "not read"),
]


@pytest.mark.parametrize(("check_id", "status", "mutate", "text"), CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_check(healthy: Facts, check_id: str, status: str, mutate: Callable[[Facts], None], text: str) -> None:
    facts = copy.deepcopy(healthy)
    mutate(facts)
    r = by_id(facts)[check_id]
    assert r["status"] == status, r
    assert text in r["message"], r
    if status in ("warn", "fail"):
        assert r["fix"], r


def test_every_check_has_a_pass_and_a_non_pass_case() -> None:
    seen: dict[str, set[str]] = {}
    for cid, status, _, _ in CASES:
        seen.setdefault(cid, set()).add(status)
    for cid in CHECK_IDS:
        assert seen.get(cid, set()) - {"pass"}, f"{cid} has no warn/fail/skip case"


def test_idle_pcie_downshift_is_not_a_problem(healthy: Facts) -> None:
    r = by_id(healthy)["gpu.pcie"]
    assert r["status"] == "pass" and "while idle" in r["message"]


def test_ib_disable_with_ib_and_conf_file(healthy: Facts) -> None:
    facts = copy.deepcopy(healthy)
    _nccl(conf={"NCCL_IB_DISABLE": "1"})(facts)
    r = by_id(facts)["nccl.values"]
    assert r["status"] == "fail" and "/etc/nccl.conf" in r["message"] and r["fix"] == "unset NCCL_IB_DISABLE"
