"""The doctor's checks: pure functions over an environment snapshot.

Each check takes the facts from :func:`perfscope.collectors.host.environment.snapshot` and
returns one result dict::

    {"id": "gpu.persistence", "status": "pass" | "warn" | "fail" | "skip",
     "message": "one line: what was found", "fix": "the exact command or setting to try"}

``fix`` is empty when there is nothing to do.  A check whose facts could not be gathered
(no GPU, no NVML, no root to read a file) says ``skip`` and why; none of them changes
anything.  :func:`run_checks` runs them all and never raises.  The checks live by topic in
:mod:`.checks_gpu`, :mod:`.checks_system` and :mod:`.checks_nccl`; their shared shape in
:mod:`.check_common`.
"""
from __future__ import annotations

from collections.abc import Callable

from perfscope.collectors.host.check_common import STATUSES, Facts, Result, result, worst
from perfscope.collectors.host.checks_gpu import (
    check_gpu_clocks,
    check_gpu_driver,
    check_gpu_mps,
    check_gpu_pcie,
    check_gpu_persistence,
    check_gpu_power_limit,
    check_gpu_throttle,
    check_gpu_topology,
)
from perfscope.collectors.host.checks_nccl import check_nccl_conf, check_nccl_names, check_nccl_values, nccl_settings
from perfscope.collectors.host.checks_system import (
    check_cpu_governor,
    check_gpudirect_rdma,
    check_ib_devices,
    check_memlock,
    check_numa_balancing,
    check_numa_gpu_affinity,
    check_numa_process_binding,
    check_shm,
    check_thp,
)


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


__all__ = ["CHECKS", "CHECK_IDS", "STATUSES", "Facts", "Result", "nccl_settings", "result", "run_checks", "summarize", "worst"]
