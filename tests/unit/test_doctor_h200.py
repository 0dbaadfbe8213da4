"""The checks over a real snapshot: ``perfscope doctor --json`` run on the H200 device machine
(one NVIDIA H200, driver 580.159.04, one NUMA node, no InfiniBand, 2026-12-02), stored as
tests/data/doctor/h200_snapshot.json."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from doctor_fakes import DATA

from perfscope.collectors.host.checks import CHECK_IDS, run_checks

# What the H200 reported, check by check.
EXPECTED = {
    "gpu.driver": "pass", "gpu.persistence": "pass", "gpu.throttle": "pass", "gpu.clocks": "pass",
    "gpu.power_limit": "pass", "gpu.pcie": "pass", "gpu.topology": "skip", "gpu.mps": "pass",
    "numa.gpu_affinity": "pass", "numa.process_binding": "pass", "cpu.governor": "skip",
    "kernel.numa_balancing": "pass", "memory.thp": "pass", "memory.shm": "pass", "rdma.memlock": "pass",
    "rdma.devices": "skip", "rdma.gpudirect": "skip", "nccl.names": "pass", "nccl.values": "pass",
    "nccl.conf": "pass",
}


@pytest.fixture(scope="module")
def h200() -> dict[str, Any]:
    return json.loads((DATA / "h200_snapshot.json").read_text())


def test_stored_document_shape(h200: dict[str, Any]) -> None:
    assert set(h200) == {"facts", "checks", "summary"}
    assert [c["id"] for c in h200["checks"]] == list(CHECK_IDS)
    assert h200["summary"] == {"pass": 16, "warn": 0, "fail": 0, "skip": 4}


def test_checks_over_the_h200_snapshot(h200: dict[str, Any]) -> None:
    now = {r["id"]: r for r in run_checks(h200["facts"])}
    assert {k: r["status"] for k, r in now.items()} == EXPECTED
    # Today's checks agree with what the doctor said on the machine.
    assert {c["id"]: c["status"] for c in h200["checks"]} == EXPECTED
    assert "NVIDIA H200" in now["gpu.driver"]["message"] and "580.159.04" in now["gpu.driver"]["message"]
    assert now["gpu.pcie"]["message"] == "GPU0 Gen5 x16"
    assert "gpu_idle" in now["gpu.throttle"]["message"]
    assert "700 W" in now["gpu.power_limit"]["message"]
    # NCCL_VERSION comes from the CUDA container image; it is not a setting.
    assert "NCCL_VERSION" in now["nccl.names"]["message"] and now["nccl.values"]["message"] == "no NCCL settings to judge"


def test_h200_facts(h200: dict[str, Any]) -> None:
    f = h200["facts"]
    d = f["gpus"]["devices"][0]
    assert f["gpus"]["count"] == 1 and f["gpus"]["cuda_driver_version"] == "13.0"
    assert d["memory_total_bytes"] == 150754820096 and d["clocks"]["max_sm_mhz"] == 1980
    assert d["numa_node"] is None and "numa_node" in d["errors"]  # NVML: not supported in this VM
    assert f["memory"]["memlock"]["soft_bytes"] == -1 and f["memory"]["shm"]["total_bytes"] == 128 << 30


@pytest.mark.parametrize(
    ("change", "check_id", "status"),
    [
        (lambda f: f["gpus"]["devices"][0].update(persistence_mode=False), "gpu.persistence", "warn"),
        (lambda f: f["gpus"]["devices"][0]["pcie"].update(width=8), "gpu.pcie", "fail"),
        (lambda f: f["memory"]["shm"].update(total_bytes=64 << 20), "memory.shm", "fail"),
        (lambda f: f["env"]["nccl"].update(NCCL_P2P_DISABLE="1"), "nccl.values", "warn"),
        (lambda f: f["infiniband"]["devices"].append({"name": "mlx5_0", "ports": [{"port": 1, "state": "4: ACTIVE"}]}), "rdma.gpudirect", "warn"),
    ],
)
def test_the_same_machine_misconfigured(h200: dict[str, Any], change: Any, check_id: str, status: str) -> None:
    facts = copy.deepcopy(h200["facts"])
    change(facts)
    assert {r["id"]: r["status"] for r in run_checks(facts)}[check_id] == status
