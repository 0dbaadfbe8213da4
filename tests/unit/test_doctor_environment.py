"""The environment snapshot over fake /proc, /sys, /etc trees and a fake NVML."""
from __future__ import annotations

import json
from pathlib import Path

from doctor_fakes import FakeNvml, make_tree, nvml_spec

from perfscope.collectors.host.environment import format_cpulist, parse_cpulist, parse_nccl_conf, snapshot


def _snap(tmp_path: Path, nvml: object | None = None, env: dict[str, str] | None = None, **tree: object) -> dict:
    roots = make_tree(tmp_path, **tree)
    return snapshot(nvml=nvml if nvml is not None else FakeNvml(), env=env or {"HOME": str(tmp_path / "home")}, **roots)


def test_cpulist_round_trip() -> None:
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert parse_cpulist(None) == [] and format_cpulist([]) == ""


def test_snapshot_reads_fake_trees(tmp_path: Path) -> None:
    facts = _snap(tmp_path, ib_ports={"mlx5_0": "4: ACTIVE"}, modules=["nvidia", "nvidia_peermem", "ib_core"], memlock="65536",
                  env=None, governors=["performance", "powersave"], numa_balancing=1)
    assert facts["errors"] == []
    assert facts["process"] == {"pid": 4242, "cpu_affinity": "0-3", "mems_allowed": "0", "local_rank": None, "cuda_visible_devices": None}
    assert facts["cpu"]["governors"] == {"performance": 1, "powersave": 1}
    assert facts["cpu"]["numa_balancing"] == 1
    assert [n["cpus"] for n in facts["numa"]["nodes"]] == ["0-3", "4-7"]
    assert facts["memory"]["thp_enabled"] == "madvise" and facts["memory"]["thp_defrag"] == "defer+madvise"
    assert facts["memory"]["memlock"] == {"soft_bytes": 65536, "hard_bytes": 65536}
    assert facts["memory"]["shm"]["total_bytes"] > 0
    ib = facts["infiniband"]
    assert ib["devices"][0]["name"] == "mlx5_0" and ib["devices"][0]["ports"][0]["state"] == "4: ACTIVE"
    assert ib["peermem_module"] == "nvidia_peermem"
    json.dumps(facts)  # everything stored in run.json must be plain JSON


def test_snapshot_gpu_facts_from_fake_nvml(tmp_path: Path) -> None:
    nvml = FakeNvml()
    facts = _snap(tmp_path, nvml=nvml)
    g = facts["gpus"]
    assert g["available"] and g["count"] == 2 and g["driver_version"] == "580.159.03" and g["cuda_driver_version"] == "13.0"
    d0 = g["devices"][0]
    assert d0["name"] == "NVIDIA H100 80GB HBM3" and d0["pci_bus_id"] == "00000000:18:00.0"
    assert d0["persistence_mode"] is True and d0["compute_mode"] == "default"
    assert d0["clocks"]["max_sm_mhz"] == 1980 and d0["throttle_reason_names"] == ["gpu_idle"]
    assert d0["pcie"] == {"gen": 1, "max_gen": 5, "gpu_max_gen": 5, "width": 16, "max_width": 16}
    assert d0["numa_node"] == 0 and d0["cpu_affinity"] == "0-3"
    assert g["devices"][1]["cpu_affinity"] == "4-7"
    assert d0["power_w"] == 71.0 and d0["power_limit_w"] == 700.0 and d0["nvlink_active"] == 18
    assert g["topology"] == [{"gpus": [0, 1], "level": "SYS"}]
    assert nvml.initialised == 0  # init and shutdown paired


def test_unsupported_nvml_fields_become_none(tmp_path: Path) -> None:
    spec = nvml_spec()
    for d in spec["devices"]:
        d["persistence_mode"] = None
        d["numa_node"] = None
    facts = _snap(tmp_path, nvml=FakeNvml(spec))
    d0 = facts["gpus"]["devices"][0]
    assert d0["persistence_mode"] is None and d0["numa_node"] is None
    assert "persistence_mode" in d0["errors"]


def test_snapshot_without_nvml(tmp_path: Path) -> None:
    facts = _snap(tmp_path, nvml=FakeNvml(fail_init="Driver Not Loaded"))
    assert facts["gpus"]["available"] is False
    assert "Driver Not Loaded" in facts["gpus"]["reason"]


def test_env_and_nccl_conf(tmp_path: Path) -> None:
    conf = tmp_path / "my.conf"
    conf.write_text("# comment\nNCCL_IB_HCA=mlx5\nNCCL_DEBUG = INFO\nnonsense\n")
    env = {"NCCL_CONF_FILE": str(conf), "NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": "1", "LOCAL_RANK": "0", "HOME": "/nowhere", "SECRET": "x"}
    facts = _snap(tmp_path, env=env, nccl_conf="NCCL_SOCKET_IFNAME=eth0\n")
    assert facts["env"]["nccl"] == {"NCCL_CONF_FILE": str(conf), "NCCL_DEBUG": "WARN"}
    assert facts["env"]["cuda"] == {"CUDA_VISIBLE_DEVICES": "1"}
    assert facts["env"]["other"] == {"LOCAL_RANK": "0"}
    assert facts["process"]["local_rank"] == 0
    first, etc = facts["nccl_conf"]
    assert first["source"] == "NCCL_CONF_FILE" and first["settings"] == {"NCCL_IB_HCA": "mlx5", "NCCL_DEBUG ": " INFO"}
    assert len(first["problems"]) == 2
    assert etc["settings"] == {"NCCL_SOCKET_IFNAME": "eth0"}


def test_parse_nccl_conf_like_nccl() -> None:
    settings, problems = parse_nccl_conf("NCCL_A=1\r\n#NCCL_B=2\nNCCL_C=x=y\n")
    assert settings == {"NCCL_A": "1", "NCCL_C": "x=y"} and problems == []


def test_mps_daemon_seen(tmp_path: Path) -> None:
    facts = _snap(tmp_path, mps_daemon=True)
    assert facts["mps"]["daemons"] == ["nvidia-cuda-mps-control"]


def test_missing_files_are_none_not_errors(tmp_path: Path) -> None:
    facts = _snap(tmp_path, numa_balancing=None, thp=None, defrag=None, governors=[], nodes={})
    assert facts["cpu"]["numa_balancing"] is None and facts["cpu"]["governors"] == {}
    assert facts["memory"]["thp_enabled"] is None and facts["numa"]["nodes"] == []
    assert facts["errors"] == []


def test_live_snapshot_runs_here() -> None:
    # Whatever this machine is (CI: no GPU, no root), the snapshot completes.
    facts = snapshot()
    assert {"process", "cpu", "memory", "gpus", "env", "nccl_conf"} <= set(facts)
    json.dumps(facts)


def test_numa_node_falls_back_to_sysfs(tmp_path: Path) -> None:
    spec = nvml_spec()
    for d in spec["devices"]:
        d["numa_node"] = None
    roots = make_tree(tmp_path)
    node_file = roots["sys"] / "bus" / "pci" / "devices" / "0000:9a:00.0" / "numa_node"
    node_file.parent.mkdir(parents=True)
    node_file.write_text("1\n")
    facts = snapshot(nvml=FakeNvml(spec), env={}, **roots)
    d0, d1 = facts["gpus"]["devices"]
    assert (d0["numa_node"], d0["numa_node_source"]) == (None, None)
    assert (d1["numa_node"], d1["numa_node_source"]) == (1, "sysfs")
