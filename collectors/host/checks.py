"""The doctor's checks: pure functions over an environment snapshot.

Each check takes the facts from :func:`perfscope.collectors.host.environment.snapshot` and
returns one result dict::

    {"id": "gpu.persistence", "status": "pass" | "warn" | "fail" | "skip",
     "message": "one line: what was found", "fix": "the exact command or setting to try"}

``fix`` is empty when there is nothing to do.  A check whose facts could not be gathered
(no GPU, no NVML, no root to read a file) says ``skip`` and why; none of them changes
anything.  :func:`run_checks` runs them all and never raises.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from perfscope.collectors.host.environment import parse_cpulist
from perfscope.collectors.host.nccl_vars import (
    INFORMATIONAL_NCCL_VARS,
    KNOWN_NCCL_VARS,
    RENAMED_NCCL_VARS,
    is_known_nccl_var,
)

Facts = dict[str, Any]
Result = dict[str, str]
STATUSES = ("pass", "warn", "fail", "skip")
_RANK = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}

MiB = 1 << 20
GiB = 1 << 30

# Throttle reasons that mean the hardware is protecting itself (fail) or software is
# capping clocks (warn).  Idle, application-clock and sync-boost reasons are normal.
HW_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_THROTTLE = ("sw_thermal_slowdown", "sw_power_cap")

NVIDIA_SMI_PERF = "nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER"


def result(check_id: str, status: str, message: str, fix: str = "") -> Result:
    """Return one check result; ``message`` is folded onto one line."""
    assert status in STATUSES, status
    return {"id": check_id, "status": status, "message": " ".join(message.split()), "fix": fix}


def worst(statuses: list[str]) -> str:
    """Return the most severe of ``statuses`` (fail > warn > pass); ``pass`` for none."""
    return max(statuses, key=lambda s: _RANK[s], default="pass")


def _gpus(facts: Facts) -> tuple[list[dict[str, Any]], str | None]:
    """Return (GPU device facts, None) or ([], the reason there are none)."""
    g = facts.get("gpus") or {}
    devices = g.get("devices") or []
    if not devices:
        if g.get("reason") and not g.get("available"):
            return [], "no GPU visible to NVML (gpu.driver says why)"
        return [], g.get("reason") or "no GPU facts in this snapshot"
    return devices, None


def _name(d: dict[str, Any]) -> str:
    return f"GPU{d.get('index')}"


def _numa_nodes(facts: Facts) -> list[dict[str, Any]]:
    return ((facts.get("numa") or {}).get("nodes")) or []


def _ib_devices(facts: Facts) -> list[dict[str, Any]]:
    return ((facts.get("infiniband") or {}).get("devices")) or []


def _size(n: int) -> str:
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n >> 10} KiB"


# -- GPUs -------------------------------------------------------------------------------
def check_gpu_driver(facts: Facts) -> Result:
    """NVML answers and which driver, CUDA version and GPUs it reports."""
    cid = "gpu.driver"
    g = facts.get("gpus") or {}
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", f"no GPU checks: {g.get('reason') or reason}", "run on a GPU node with the NVIDIA driver and `pip install nvidia-ml-py`")
    names = sorted({str(d.get("name")) for d in devices})
    return result(cid, "pass", f"driver {g.get('driver_version')}, CUDA {g.get('cuda_driver_version')}, {len(devices)} GPU(s): {', '.join(names)}")


def check_gpu_persistence(facts: Facts) -> Result:
    """Persistence mode keeps the driver loaded between jobs."""
    cid = "gpu.persistence"
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    known = [d for d in devices if d.get("persistence_mode") is not None]
    if not known:
        return result(cid, "skip", "NVML does not report persistence mode here")
    off = [_name(d) for d in known if not d["persistence_mode"]]
    if off:
        return result(
            cid, "warn",
            f"persistence mode off on {', '.join(off)}: the driver tears down between jobs, so each start pays seconds of initialisation and loses clock settings",
            "sudo nvidia-smi -pm 1   (better: sudo systemctl enable --now nvidia-persistenced)",
        )
    return result(cid, "pass", f"persistence mode on ({len(known)} GPU(s))")


def check_gpu_throttle(facts: Facts) -> Result:
    """Current clocks-event (throttle) reasons: hardware slowdowns fail, software caps warn."""
    cid = "gpu.throttle"
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    if all(d.get("throttle_reasons") is None for d in devices):
        return result(cid, "skip", "NVML does not report throttle reasons here")
    hw, sw, seen = [], [], []
    for d in devices:
        names = d.get("throttle_reason_names") or []
        seen.append(f"{_name(d)}: {'+'.join(names) or 'none'}")
        hw += [f"{_name(d)} {n}" for n in names if n in HW_THROTTLE]
        sw += [f"{_name(d)} {n}" for n in names if n in SW_THROTTLE]
    if hw:
        return result(cid, "fail", f"hardware is slowing clocks ({', '.join(hw)}): overheating, power brake or a power-supply fault",
                      f"{NVIDIA_SMI_PERF}   then check airflow, inlet temperature, PSUs and the power-brake cable")
    if sw:
        return result(cid, "warn", f"software is capping clocks ({', '.join(sw)}): at the power limit or too hot",
                      f"{NVIDIA_SMI_PERF}   then check cooling, or raise the power limit: sudo nvidia-smi -pl <watts>")
    return result(cid, "pass", f"no clock slowdown ({'; '.join(seen)})")


def check_gpu_clocks(facts: Facts) -> Result:
    """Application clocks set below their default (someone ran nvidia-smi -ac)."""
    cid = "gpu.clocks"
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    low, info = [], []
    for d in devices:
        c = d.get("clocks") or {}
        app, default, mx = c.get("app_sm_mhz"), c.get("default_app_sm_mhz"), c.get("max_sm_mhz")
        app_mem, default_mem = c.get("app_mem_mhz"), c.get("default_app_mem_mhz")
        if app is not None and default is not None and app < default:
            low.append(f"{_name(d)} SM {app} MHz < default {default}")
        if app_mem is not None and default_mem is not None and app_mem < default_mem:
            low.append(f"{_name(d)} mem {app_mem} MHz < default {default_mem}")
        info.append(f"{_name(d)} SM {c.get('sm_mhz')}/{mx} MHz, mem {c.get('mem_mhz')}/{c.get('max_mem_mhz')} MHz")
    if low:
        return result(cid, "warn", f"application clocks lowered: {', '.join(low)}", "sudo nvidia-smi -rac   (reset application clocks to default)")
    if all((d.get("clocks") or {}).get("max_sm_mhz") is None for d in devices):
        return result(cid, "skip", "NVML does not report clocks here")
    return result(cid, "pass", f"application clocks at default; current/max: {'; '.join(info)}")


def check_gpu_power_limit(facts: Facts) -> Result:
    """An enforced power limit below the board's default costs clock speed under load."""
    cid = "gpu.power_limit"
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    known = [d for d in devices if d.get("power_limit_w") and d.get("default_power_limit_w")]
    if not known:
        return result(cid, "skip", "NVML does not report power limits here")
    low = [d for d in known if d["power_limit_w"] < 0.95 * d["default_power_limit_w"]]
    if low:
        d = low[0]
        return result(
            cid, "warn",
            ", ".join(f"{_name(x)} limited to {x['power_limit_w']:.0f} W of {x['default_power_limit_w']:.0f} W" for x in low),
            f"sudo nvidia-smi -i {d.get('index')} -pl {d['default_power_limit_w']:.0f}",
        )
    return result(cid, "pass", ", ".join(f"{_name(d)} {d['power_limit_w']:.0f} W (default {d['default_power_limit_w']:.0f} W)" for d in known))


def check_gpu_pcie(facts: Facts) -> Result:
    """PCIe link generation and width, current against maximum."""
    cid = "gpu.pcie"
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    fix = "nvidia-smi -q -d PCIE while training; reseat the GPU or riser and set the slot to Auto/its top generation in the BIOS"
    fails, warns, notes = [], [], []
    for d in devices:
        p = d.get("pcie") or {}
        gen, mgen, gpu_mgen, w, mw = p.get("gen"), p.get("max_gen"), p.get("gpu_max_gen"), p.get("width"), p.get("max_width")
        if gen is None and w is None:
            continue
        n = _name(d)
        if w is not None and mw is not None and w < mw:
            fails.append(f"{n} link x{w} of x{mw}")
        idle = "gpu_idle" in (d.get("throttle_reason_names") or []) or d.get("sm_util_pct") == 0
        if gen is not None and mgen is not None and gen < mgen:
            if idle:
                notes.append(f"{n} Gen{gen} of Gen{mgen} while idle (links slow down at idle)")
            else:
                warns.append(f"{n} Gen{gen} of Gen{mgen} under load")
        elif gen is not None:
            notes.append(f"{n} Gen{gen} x{w}")
        if mgen is not None and gpu_mgen is not None and mgen < gpu_mgen:
            warns.append(f"{n} slot allows Gen{mgen}, the GPU supports Gen{gpu_mgen}")
    if not (fails or warns or notes):
        return result(cid, "skip", "NVML does not report PCIe links here")
    if fails:
        return result(cid, "fail", f"PCIe link narrower than it can be: {', '.join(fails + warns)}", fix)
    if warns:
        return result(cid, "warn", f"PCIe link slower than it can be: {', '.join(warns)}", fix)
    return result(cid, "pass", "; ".join(notes))


def check_gpu_mps(facts: Facts) -> Result:
    """MPS daemons and compute modes: shared or prohibited GPUs."""
    cid = "gpu.mps"
    mps = facts.get("mps") or {}
    devices, reason = _gpus(facts)
    daemons = mps.get("daemons") or []
    if daemons:
        return result(cid, "warn", f"MPS is running ({', '.join(daemons)}): CUDA processes here share the GPUs through it, and kernels of other clients interleave with yours",
                      "echo quit | nvidia-cuda-mps-control   (if MPS is not intended)")
    if mps.get("control_pipe"):
        return result(cid, "warn", f"an MPS control pipe exists in {mps.get('pipe_directory')}: CUDA processes here will connect to an MPS server",
                      "echo quit | nvidia-cuda-mps-control   (or unset CUDA_MPS_PIPE_DIRECTORY)")
    if reason:
        return result(cid, "skip", reason)
    prohibited = [_name(d) for d in devices if d.get("compute_mode") == "prohibited"]
    if prohibited:
        return result(cid, "fail", f"compute mode 'prohibited' on {', '.join(prohibited)}: no CUDA context can be created", "sudo nvidia-smi -c DEFAULT")
    modes = sorted({str(d.get("compute_mode")) for d in devices})
    return result(cid, "pass", f"MPS not running; compute mode {', '.join(modes)}")


def check_gpu_topology(facts: Facts) -> Result:
    """GPU pairs that talk only through the CPU have low peer-to-peer bandwidth."""
    cid = "gpu.topology"
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    if len(devices) < 2:
        return result(cid, "skip", "one GPU: no GPU-to-GPU links to check")
    nvlink = {d.get("index"): (d.get("nvlink_active") or 0) for d in devices}
    pairs = (facts.get("gpus") or {}).get("topology") or []
    far = [p for p in pairs if p.get("level") in ("NODE", "SYS") and not (nvlink.get(p["gpus"][0]) and nvlink.get(p["gpus"][1]))]
    if far:
        shown = ", ".join(f"GPU{a}-GPU{b} {p['level']}" for p in far[:4] for a, b in [p["gpus"]])
        return result(cid, "warn", f"{len(far)} GPU pair(s) without NVLink cross the CPU ({shown}): peer-to-peer traffic is slow there",
                      "nvidia-smi topo -m; put ranks that exchange most on GPUs under one PCIe switch")
    links = ", ".join(f"GPU{i} {n} NVLink" for i, n in nvlink.items())
    return result(cid, "pass", f"GPUs linked by NVLink or a shared PCIe switch ({links})")


# -- NUMA and CPU -----------------------------------------------------------------------
def check_numa_gpu_affinity(facts: Facts) -> Result:
    """Each GPU's NUMA node and CPU affinity are known (so ranks can be bound)."""
    cid = "numa.gpu_affinity"
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    nodes = _numa_nodes(facts)
    place = []
    unknown = []
    for d in devices:
        node, cpus = d.get("numa_node"), d.get("cpu_affinity")
        place.append(f"{_name(d)}: node {node if node is not None else '?'}, CPUs {cpus or '?'}")
        if node is None or node < 0:
            unknown.append(_name(d))
    if len(nodes) <= 1:
        return result(cid, "pass", f"one NUMA node: every GPU is local ({'; '.join(place)})")
    if unknown:
        return result(cid, "warn", f"NUMA node unknown for {', '.join(unknown)} on a {len(nodes)}-node machine: ranks cannot be bound to their GPU's socket",
                      "cat /sys/bus/pci/devices/<bus id>/numa_node; enable NUMA (ACPI SRAT) reporting in the BIOS")
    return result(cid, "pass", "; ".join(place))


def _rank_gpu(facts: Facts, devices: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The GPU this process drives: its LOCAL_RANK among the visible GPUs, or the only one."""
    p = facts.get("process") or {}
    visible = p.get("cuda_visible_devices")
    if visible is not None:
        ids = [v.strip() for v in str(visible).split(",") if v.strip()]
    else:
        ids = [str(d.get("index")) for d in devices]
    local = p.get("local_rank")
    if local is None:
        if len(ids) != 1:
            return None
        local = 0
    if not 0 <= local < len(ids):
        return None
    want = ids[local]
    for d in devices:
        if want == str(d.get("index")) or (want.startswith("GPU-") and str(d.get("uuid", "")).startswith(want)):
            return d
    return None


def check_numa_process_binding(facts: Facts) -> Result:
    """The process's CPU affinity and memory binding against its GPU's NUMA node."""
    cid = "numa.process_binding"
    devices, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    nodes = _numa_nodes(facts)
    p = facts.get("process") or {}
    if len(nodes) <= 1:
        return result(cid, "pass", f"one NUMA node: binding cannot matter (process CPUs {p.get('cpu_affinity')})")
    gpu = _rank_gpu(facts, devices)
    if gpu is None:
        return result(cid, "skip", f"this process drives no particular GPU (no LOCAL_RANK, {len(devices)} GPUs visible); each rank is checked when a run is recorded",
                      "numactl --cpunodebind=<node of the rank's GPU> --membind=<same node> python train.py")
    node = gpu.get("numa_node")
    gpu_cpus = set(parse_cpulist(gpu.get("cpu_affinity")))
    if node is None or node < 0 or not gpu_cpus:
        return result(cid, "skip", f"{_name(gpu)}'s NUMA node is unknown, so its binding cannot be judged")
    fix = f"numactl --cpunodebind={node} --membind={node} python train.py"
    cpus = set(parse_cpulist(p.get("cpu_affinity")))
    mems = set(parse_cpulist(p.get("mems_allowed")))
    problems: list[tuple[str, str]] = []
    if cpus and not cpus & gpu_cpus:
        problems.append(("fail", f"runs on CPUs {p.get('cpu_affinity')}, all remote from {_name(gpu)} (node {node})"))
    elif cpus and not cpus <= gpu_cpus:
        problems.append(("warn", f"may run on any of CPUs {p.get('cpu_affinity')}, not only {_name(gpu)}'s node {node} ({gpu.get('cpu_affinity')})"))
    if mems and node not in mems:
        problems.append(("fail", f"memory bound to node(s) {p.get('mems_allowed')}, not {_name(gpu)}'s node {node}"))
    elif len(mems) > 1:
        problems.append(("warn", f"memory may come from nodes {p.get('mems_allowed')}, not only node {node}"))
    if problems:
        return result(cid, worst([s for s, _ in problems]), "this rank " + "; ".join(m for _, m in problems), fix)
    return result(cid, "pass", f"bound to {_name(gpu)}'s node {node} (CPUs {p.get('cpu_affinity')}, memory node(s) {p.get('mems_allowed')})")


def check_cpu_governor(facts: Facts) -> Result:
    """CPU frequency governor: anything but ``performance`` adds launch latency."""
    cid = "cpu.governor"
    govs = (facts.get("cpu") or {}).get("governors") or {}
    if not govs:
        return result(cid, "skip", "no cpufreq governors under /sys/devices/system/cpu (VM or container without frequency scaling)")
    others = {g: n for g, n in govs.items() if g != "performance"}
    if others:
        shown = ", ".join(f"{n} CPU(s) {g}" for g, n in sorted(others.items()))
        return result(cid, "warn", f"{shown}: the CPUs clock down between kernel launches, so the host falls behind the GPU",
                      "sudo cpupower frequency-set -g performance")
    return result(cid, "pass", f"all {sum(govs.values())} CPUs use the performance governor")


def check_numa_balancing(facts: Facts) -> Result:
    """Automatic NUMA balancing migrates pages and threads under a bound job."""
    cid = "kernel.numa_balancing"
    value = (facts.get("cpu") or {}).get("numa_balancing")
    if value is None:
        return result(cid, "skip", "/proc/sys/kernel/numa_balancing is not readable here")
    nodes = len(_numa_nodes(facts))
    if value and nodes > 1:
        return result(cid, "warn", f"automatic NUMA balancing is on ({nodes} nodes): the kernel unmaps pages to sample them and moves memory, adding jitter to pinned ranks",
                      "sudo sysctl -w kernel.numa_balancing=0")
    return result(cid, "pass", "automatic NUMA balancing off" if not value else "automatic NUMA balancing on, harmless with one NUMA node")


# -- memory -----------------------------------------------------------------------------
def check_thp(facts: Facts) -> Result:
    """Transparent huge pages: ``never`` costs TLB misses, ``defrag=always`` stalls allocations."""
    cid = "memory.thp"
    m = facts.get("memory") or {}
    enabled, defrag = m.get("thp_enabled"), m.get("thp_defrag")
    if enabled is None:
        return result(cid, "skip", "/sys/kernel/mm/transparent_hugepage is not readable here")
    if enabled == "never":
        return result(cid, "warn", "transparent huge pages disabled: large host buffers (pinned staging, dataloader batches) take more TLB misses",
                      "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled")
    if defrag == "always":
        return result(cid, "warn", f"THP {enabled} with defrag=always: allocations stall in direct compaction",
                      "echo defer+madvise | sudo tee /sys/kernel/mm/transparent_hugepage/defrag")
    return result(cid, "pass", f"transparent huge pages {enabled}, defrag {defrag}")


def check_shm(facts: Facts) -> Result:
    """``/dev/shm`` size: NCCL's shared-memory transport and DataLoader workers live there."""
    cid = "memory.shm"
    shm = (facts.get("memory") or {}).get("shm") or {}
    total, free = shm.get("total_bytes"), shm.get("free_bytes")
    fix = "docker run --ipc=host (or --shm-size=16g); Kubernetes: mount an emptyDir {medium: Memory} at /dev/shm; bare metal: sudo mount -o remount,size=16G /dev/shm"
    if total is None:
        return result(cid, "skip", f"{shm.get('path', '/dev/shm')} is not mounted or not readable ({shm.get('error', 'unknown')})", fix)
    if total < 256 * MiB:
        return result(cid, "fail", f"/dev/shm is {_size(total)} (a container default?): NCCL fails with 'unable to allocate shared memory' and DataLoader workers crash", fix)
    if total < GiB or (free is not None and free < 256 * MiB):
        return result(cid, "warn", f"/dev/shm is {_size(total)} with {_size(free or 0)} free: tight for NCCL buffers plus DataLoader workers", fix)
    return result(cid, "pass", f"/dev/shm {_size(total)} ({_size(free or 0)} free)")


def check_memlock(facts: Facts) -> Result:
    """Locked-memory limit: RDMA registers (locks) NCCL's buffers."""
    cid = "rdma.memlock"
    lim = (facts.get("memory") or {}).get("memlock") or {}
    soft = lim.get("soft_bytes")
    if soft is None:
        return result(cid, "skip", "the locked-memory limit is not readable here")
    shown = "unlimited" if soft == -1 else _size(soft)
    fix = "ulimit -l unlimited; persist with '* - memlock unlimited' in /etc/security/limits.conf (Docker: --ulimit memlock=-1; Slurm: PropagateResourceLimits=MEMLOCK)"
    if soft == -1:
        return result(cid, "pass", "locked-memory limit unlimited")
    if _ib_devices(facts):
        return result(cid, "fail", f"locked-memory limit {shown} with RDMA devices present: NCCL's InfiniBand transport fails to register memory (ibv_reg_mr)", fix)
    return result(cid, "pass", f"locked-memory limit {shown}; it matters only for RDMA, and there is no RDMA device here")


# -- InfiniBand and GPUDirect RDMA ------------------------------------------------------
def check_ib_devices(facts: Facts) -> Result:
    """InfiniBand/RoCE devices and the state of their ports."""
    cid = "rdma.devices"
    devs = _ib_devices(facts)
    if not devs:
        return result(cid, "skip", "no InfiniBand/RoCE devices in /sys/class/infiniband: NCCL between nodes would use TCP sockets")
    down, up = [], []
    for d in devs:
        for p in d.get("ports") or []:
            label = f"{d['name']}:{p.get('port')}"
            state = str(p.get("state") or "")
            if "ACTIVE" in state:
                up.append(f"{label} {p.get('rate') or ''} {p.get('link_layer') or ''}".strip())
            else:
                down.append(f"{label} {state or 'unknown'}")
    if down:
        first = down[0].split(":")[0]
        return result(cid, "warn", f"RDMA ports not active: {', '.join(down)}; active: {', '.join(up) or 'none'}",
                      f"ibstat; check cables and the subnet manager (sminfo), or leave the port out: NCCL_IB_HCA=^{first}")
    return result(cid, "pass", f"{len(up)} active RDMA port(s): {', '.join(up[:4])}{' ...' if len(up) > 4 else ''}")


def check_gpudirect_rdma(facts: Facts) -> Result:
    """The GPUDirect RDMA module lets the NIC read GPU memory directly."""
    cid = "rdma.gpudirect"
    ib = facts.get("infiniband") or {}
    if not _ib_devices(facts):
        return result(cid, "skip", "no RDMA devices, so GPUDirect RDMA does not apply")
    _, reason = _gpus(facts)
    if reason:
        return result(cid, "skip", reason)
    if not ib.get("modules_readable"):
        return result(cid, "skip", "/proc/modules is not readable here")
    if ib.get("peermem_module"):
        return result(cid, "pass", f"GPUDirect RDMA module {ib['peermem_module']} loaded")
    return result(cid, "warn", "nvidia_peermem is not loaded: NCCL stages network traffic through host memory unless DMA-BUF works (Linux >= 5.12 with the open kernel modules)",
                  "sudo modprobe nvidia_peermem; persist: echo nvidia_peermem | sudo tee /etc/modules-load.d/nvidia-peermem.conf")


# -- NCCL -------------------------------------------------------------------------------
def nccl_settings(facts: Facts) -> dict[str, tuple[str, str]]:
    """Return the NCCL settings in effect: {name: (value, source)}.

    NCCL reads the environment first; a conf file only fills names that are still unset
    (``setenv(..., 0)``), and the first file read wins over later ones.
    """
    out: dict[str, tuple[str, str]] = {}
    for f in reversed(facts.get("nccl_conf") or []):
        for k, v in (f.get("settings") or {}).items():
            out[k.strip()] = (v.strip(), str(f.get("path")))
    for k, v in ((facts.get("env") or {}).get("nccl") or {}).items():
        out[k] = (v, "environment")
    return out


def check_nccl_names(facts: Facts) -> Result:
    """NCCL_* names NCCL does not know (typos, silently ignored) or that were renamed."""
    cid = "nccl.names"
    settings = nccl_settings(facts)
    names = [n for n in settings if n not in INFORMATIONAL_NCCL_VARS]
    if not names:
        info = sorted(n for n in settings if n in INFORMATIONAL_NCCL_VARS)
        return result(cid, "pass", "no NCCL_* settings: NCCL uses its defaults"
                      + (f" ({', '.join(info)} only describes the installed NCCL)" if info else ""))
    unknown, renamed, fixes = [], [], []
    for n in sorted(names):
        if n in RENAMED_NCCL_VARS:
            renamed.append(f"{n} (now {RENAMED_NCCL_VARS[n]})")
            fixes.append(f"rename {n} to {RENAMED_NCCL_VARS[n]}")
        elif not is_known_nccl_var(n):
            close = difflib.get_close_matches(n, KNOWN_NCCL_VARS, n=1, cutoff=0.8)
            unknown.append(n + (f" (did you mean {close[0]}?)" if close else ""))
            fixes.append(f"unset {n}" + (f" and set {close[0]}" if close else ""))
    if unknown or renamed:
        parts = ([f"unknown to NCCL, ignored: {', '.join(unknown)}"] if unknown else []) + ([f"renamed: {', '.join(renamed)}"] if renamed else [])
        return result(cid, "warn", "; ".join(parts), "; ".join(fixes))
    return result(cid, "pass", f"{len(names)} NCCL variable(s), all known: {', '.join(sorted(names))}")


def _int(v: str | None) -> int | None:
    try:
        return int(str(v).strip(), 0)
    except (TypeError, ValueError):
        return None


def check_nccl_values(facts: Facts) -> Result:
    """Risky or conflicting NCCL settings (environment and nccl.conf together)."""
    cid = "nccl.values"
    s = {k: sv for k, sv in nccl_settings(facts).items() if k not in INFORMATIONAL_NCCL_VARS}
    if not s:
        return result(cid, "pass", "no NCCL settings to judge")
    v = {k: val for k, (val, _) in s.items()}
    gpus, _ = _gpus(facts)
    has_ib = bool(_ib_devices(facts))
    found: list[tuple[str, str, str]] = []  # (status, message, fix)

    def src(k: str) -> str:
        return "" if s[k][1] == "environment" else f" (from {s[k][1]})"

    if _int(v.get("NCCL_P2P_DISABLE")) == 1:
        found.append(("fail" if len(gpus) > 1 else "warn", f"NCCL_P2P_DISABLE=1{src('NCCL_P2P_DISABLE')}: GPU-to-GPU traffic goes through host memory instead of NVLink/PCIe", "unset NCCL_P2P_DISABLE"))
        if "NCCL_P2P_LEVEL" in v:
            found.append(("warn", "NCCL_P2P_LEVEL is set but P2P is disabled, so it has no effect", "unset NCCL_P2P_LEVEL"))
    if _int(v.get("NCCL_SHM_DISABLE")) == 1:
        found.append(("warn", f"NCCL_SHM_DISABLE=1{src('NCCL_SHM_DISABLE')}: intra-node traffic without P2P falls back to the network", "unset NCCL_SHM_DISABLE"))
    if _int(v.get("NCCL_IB_DISABLE")) == 1 and has_ib:
        found.append(("fail", f"NCCL_IB_DISABLE=1{src('NCCL_IB_DISABLE')} although RDMA devices are present: inter-node traffic uses TCP sockets", "unset NCCL_IB_DISABLE"))
    if str(v.get("NCCL_NET", "")).lower() == "socket" and has_ib:
        found.append(("warn", "NCCL_NET=Socket although RDMA devices are present", "unset NCCL_NET"))
    if "NCCL_IB_HCA" in v and not has_ib:
        found.append(("warn", f"NCCL_IB_HCA={v['NCCL_IB_HCA']} but no RDMA devices are present", "unset NCCL_IB_HCA"))
    gdr = str(v.get("NCCL_NET_GDR_LEVEL", v.get("NCCL_IB_GDR_LEVEL", ""))).strip().upper()
    if gdr in ("0", "LOC") and has_ib:
        found.append(("warn", "NCCL_NET_GDR_LEVEL=LOC disables GPUDirect RDMA", "unset NCCL_NET_GDR_LEVEL"))
    debug = str(v.get("NCCL_DEBUG", "")).strip().upper()
    if debug == "TRACE":
        found.append(("warn", f"NCCL_DEBUG=TRACE{src('NCCL_DEBUG')}: every call is logged, which slows collectives", "export NCCL_DEBUG=WARN"))
    if "NCCL_DEBUG_SUBSYS" in v and not debug:
        found.append(("warn", "NCCL_DEBUG_SUBSYS is set without NCCL_DEBUG, so nothing is logged", "export NCCL_DEBUG=INFO (or unset NCCL_DEBUG_SUBSYS)"))
    nvls = _int(v.get("NCCL_NVLS_ENABLE"))
    if nvls == 1:
        found.append(("warn", "NCCL_NVLS_ENABLE=1 forces NVLink SHARP: it needs NVSwitch multicast with a running fabric manager and takes extra GPU memory; NCCL picks it by itself when it works",
                      "unset NCCL_NVLS_ENABLE (or 0 where multicast is unsafe)"))
    for key in ("NCCL_ALGO", "NCCL_PROTO"):
        if key in v:
            found.append(("warn", f"{key}={v[key]}{src(key)} overrides NCCL's tuner for every message size", f"unset {key} unless a measurement showed it faster"))
    if nvls == 0 and "NVLS" in str(v.get("NCCL_ALGO", "")).upper() and not str(v.get("NCCL_ALGO", "")).startswith("^"):
        found.append(("warn", "NCCL_ALGO asks for NVLS while NCCL_NVLS_ENABLE=0", "drop NVLS from NCCL_ALGO"))
    for lo, hi in (("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"), ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")):
        a, b = _int(v.get(lo)), _int(v.get(hi))
        if a is not None and b is not None and a > b:
            found.append(("fail", f"{lo}={a} > {hi}={b}", f"set {lo} <= {hi}"))
    buff = _int(v.get("NCCL_BUFFSIZE"))
    if buff is not None and buff < MiB:
        found.append(("warn", f"NCCL_BUFFSIZE={buff} is below 1 MiB (default 4 MiB): more, smaller transfers", "unset NCCL_BUFFSIZE"))
    ifname = str(v.get("NCCL_SOCKET_IFNAME", ""))
    if ifname.lstrip("=").startswith("lo"):
        found.append(("warn", f"NCCL_SOCKET_IFNAME={ifname}: loopback reaches no other node", "unset NCCL_SOCKET_IFNAME (or name the cluster interface)"))
    if not found:
        notes = ", ".join(f"{k}={val}" for k, val in sorted(v.items()))
        return result(cid, "pass", f"no risky NCCL settings ({notes})")
    return result(cid, worst([st for st, _, _ in found]), "; ".join(m for _, m, _ in found), "; ".join(f for _, _, f in found))


def check_nccl_conf(facts: Facts) -> Result:
    """The nccl.conf files NCCL reads: missing NCCL_CONF_FILE, lines NCCL misreads."""
    cid = "nccl.conf"
    files = facts.get("nccl_conf")
    if files is None:
        return result(cid, "skip", "nccl.conf files were not read")
    env = ((facts.get("env") or {}).get("nccl")) or {}
    problems, shown = [], []
    for f in files:
        if not f.get("exists"):
            if f.get("source") == "NCCL_CONF_FILE":
                problems.append(f"NCCL_CONF_FILE={f.get('path')} does not exist")
            continue
        settings = f.get("settings") or {}
        problems += [f"{f.get('path')} {p}" for p in f.get("problems") or []]
        shadowed = [k.strip() for k in settings if k.strip() in env]
        shown.append(f"{f.get('path')}: {', '.join(f'{k}={val}' for k, val in settings.items()) or 'empty'}"
                     + (f" (environment overrides {', '.join(shadowed)})" if shadowed else ""))
    if problems:
        return result(cid, "warn", "; ".join(problems), "write each line as NAME=value with no spaces; point NCCL_CONF_FILE at an existing file")
    if not shown:
        return result(cid, "pass", "no nccl.conf file (NCCL_CONF_FILE, ~/.nccl.conf, /etc/nccl.conf)")
    return result(cid, "pass", "; ".join(shown))


CHECKS: tuple[Callable[[Facts], Result], ...] = (
    check_gpu_driver,
    check_gpu_persistence,
    check_gpu_throttle,
    check_gpu_clocks,
    check_gpu_power_limit,
    check_gpu_pcie,
    check_gpu_topology,
    check_gpu_mps,
    check_numa_gpu_affinity,
    check_numa_process_binding,
    check_cpu_governor,
    check_numa_balancing,
    check_thp,
    check_shm,
    check_memlock,
    check_ib_devices,
    check_gpudirect_rdma,
    check_nccl_names,
    check_nccl_values,
    check_nccl_conf,
)

CHECK_IDS: tuple[str, ...] = (
    "gpu.driver", "gpu.persistence", "gpu.throttle", "gpu.clocks", "gpu.power_limit", "gpu.pcie",
    "gpu.topology", "gpu.mps", "numa.gpu_affinity", "numa.process_binding", "cpu.governor",
    "kernel.numa_balancing", "memory.thp", "memory.shm", "rdma.memlock", "rdma.devices",
    "rdma.gpudirect", "nccl.names", "nccl.values", "nccl.conf",
)


def run_checks(facts: Facts) -> list[Result]:
    """Run every check over ``facts``.

    Returns:
        one result per check, in :data:`CHECK_IDS` order; a check that raises (facts of an
        unexpected shape) comes back as ``skip`` with the error, so this never raises.
    """
    out = []
    for cid, check in zip(CHECK_IDS, CHECKS):
        try:
            out.append(check(facts))
        except Exception as e:  # noqa: BLE001 - one broken check must not hide the others
            out.append(result(cid, "skip", f"check could not run: {type(e).__name__}: {e}"))
    return out


def summarize(results: list[Result]) -> dict[str, int]:
    """Return {status: count} over ``results`` for every status."""
    counts = dict.fromkeys(STATUSES, 0)
    for r in results:
        counts[r["status"]] += 1
    return counts
