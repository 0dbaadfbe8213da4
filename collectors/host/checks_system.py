"""The doctor's host checks: NUMA placement, CPU governor, memory settings, InfiniBand and GPUDirect RDMA."""
from __future__ import annotations

from typing import Any

from perfscope.collectors.host.check_common import Facts, GiB, MiB, Result, gpu_devices, gpu_name, ib_devices, numa_nodes, result, size_text, worst
from perfscope.collectors.host.environment import parse_cpulist


# -- NUMA and CPU -----------------------------------------------------------------------
def check_numa_gpu_affinity(facts: Facts) -> Result:
    """Each GPU's NUMA node and CPU affinity are known (so ranks can be bound)."""
    cid = "numa.gpu_affinity"
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    nodes = numa_nodes(facts)
    place = []
    unknown = []
    for d in devices:
        node, cpus = d.get("numa_node"), d.get("cpu_affinity")
        place.append(f"{gpu_name(d)}: node {node if node is not None else '?'}, CPUs {cpus or '?'}")
        if node is None or node < 0:
            unknown.append(gpu_name(d))
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
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    nodes = numa_nodes(facts)
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
        return result(cid, "skip", f"{gpu_name(gpu)}'s NUMA node is unknown, so its binding cannot be judged")
    fix = f"numactl --cpunodebind={node} --membind={node} python train.py"
    cpus = set(parse_cpulist(p.get("cpu_affinity")))
    mems = set(parse_cpulist(p.get("mems_allowed")))
    problems: list[tuple[str, str]] = []
    if cpus and not cpus & gpu_cpus:
        problems.append(("fail", f"runs on CPUs {p.get('cpu_affinity')}, all remote from {gpu_name(gpu)} (node {node})"))
    elif cpus and not cpus <= gpu_cpus:
        problems.append(("warn", f"may run on any of CPUs {p.get('cpu_affinity')}, not only {gpu_name(gpu)}'s node {node} ({gpu.get('cpu_affinity')})"))
    if mems and node not in mems:
        problems.append(("fail", f"memory bound to node(s) {p.get('mems_allowed')}, not {gpu_name(gpu)}'s node {node}"))
    elif len(mems) > 1:
        problems.append(("warn", f"memory may come from nodes {p.get('mems_allowed')}, not only node {node}"))
    if problems:
        return result(cid, worst([s for s, _ in problems]), "this rank " + "; ".join(m for _, m in problems), fix)
    return result(cid, "pass", f"bound to {gpu_name(gpu)}'s node {node} (CPUs {p.get('cpu_affinity')}, memory node(s) {p.get('mems_allowed')})")


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
    nodes = len(numa_nodes(facts))
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
        return result(cid, "fail", f"/dev/shm is {size_text(total)} (a container default?): NCCL fails with 'unable to allocate shared memory' and DataLoader workers crash", fix)
    if total < GiB or (free is not None and free < 256 * MiB):
        return result(cid, "warn", f"/dev/shm is {size_text(total)} with {size_text(free or 0)} free: tight for NCCL buffers plus DataLoader workers", fix)
    return result(cid, "pass", f"/dev/shm {size_text(total)} ({size_text(free or 0)} free)")


def check_memlock(facts: Facts) -> Result:
    """Locked-memory limit: RDMA registers (locks) NCCL's buffers."""
    cid = "rdma.memlock"
    lim = (facts.get("memory") or {}).get("memlock") or {}
    soft = lim.get("soft_bytes")
    if soft is None:
        return result(cid, "skip", "the locked-memory limit is not readable here")
    shown = "unlimited" if soft == -1 else size_text(soft)
    fix = "ulimit -l unlimited; persist with '* - memlock unlimited' in /etc/security/limits.conf (Docker: --ulimit memlock=-1; Slurm: PropagateResourceLimits=MEMLOCK)"
    if soft == -1:
        return result(cid, "pass", "locked-memory limit unlimited")
    if ib_devices(facts):
        return result(cid, "fail", f"locked-memory limit {shown} with RDMA devices present: NCCL's InfiniBand transport fails to register memory (ibv_reg_mr)", fix)
    return result(cid, "pass", f"locked-memory limit {shown}; it matters only for RDMA, and there is no RDMA device here")


# -- InfiniBand and GPUDirect RDMA ------------------------------------------------------
def check_ib_devices(facts: Facts) -> Result:
    """InfiniBand/RoCE devices and the state of their ports."""
    cid = "rdma.devices"
    devs = ib_devices(facts)
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
    if not ib_devices(facts):
        return result(cid, "skip", "no RDMA devices, so GPUDirect RDMA does not apply")
    _, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    if not ib.get("modules_readable"):
        return result(cid, "skip", "/proc/modules is not readable here")
    if ib.get("peermem_module"):
        return result(cid, "pass", f"GPUDirect RDMA module {ib['peermem_module']} loaded")
    return result(cid, "warn", "nvidia_peermem is not loaded: NCCL stages network traffic through host memory unless DMA-BUF works (Linux >= 5.12 with the open kernel modules)",
                  "sudo modprobe nvidia_peermem; persist: echo nvidia_peermem | sudo tee /etc/modules-load.d/nvidia-peermem.conf")
