"""The hardware and software a run ran on, as rules need it.

Read from the run's metadata only (no tables): a recorded run's ``ranks[i]`` entries (``gpu``
with ``name``, ``capability``, ``total_memory_bytes``; ``versions`` with ``torch``, ``cuda``,
``nccl``) and its environment snapshot (``environment.facts.cpu.count``,
``environment.facts.gpus.devices``); an imported Kineto trace's ``ranks[i].gpu`` (which the
importer fills from ``deviceProperties``: ``name``, ``compute_capability``, ``memory_bytes``;
or its ``devices``, the raw ``deviceProperties``, when the importer could not tell the rank's device)
and ``ranks[i].distributed_info`` (``backend``, ``world_size``, ``nccl_version``).

Every field is ``None`` when the run does not say: a rule then keeps its general advice and
does not guess (an unknown compute capability is not "below 8.0").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HardwareContext:
    """What a run ran on.

    Attributes:
        gpu_name: the first rank's GPU model (``"Tesla V100-SXM2-32GB"``), or None.
        compute_capability: (major, minor), or None when the run does not say.
        gpu_memory_bytes: the GPU's memory, or None.
        gpu_present: True when the metadata names a GPU; False when it says there is none
            (a recorded run whose snapshot found no GPU); None when it does not say.
        cpu_count: logical CPUs of the host (the recorder's snapshot), or None.
        ranks_per_host: the most ranks that shared one host (1 without rank entries).
        torch_version, cuda_version, nccl_version, backend: as recorded, or None.
        pcie_gen, pcie_width: the GPU's current PCIe link (the snapshot's
            ``gpus.devices[i].pcie``), else the usual link of its architecture
            (:data:`PCIE_GEN_BY_CAPABILITY`, x16; then ``pcie_assumed``), or None.
    """

    gpu_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    gpu_memory_bytes: int | None = None
    gpu_present: bool | None = None
    cpu_count: int | None = None
    ranks_per_host: int = 1
    torch_version: str | None = None
    cuda_version: str | None = None
    nccl_version: str | None = None
    backend: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_assumed: bool = False

    def cc_at_least(self, major: int, minor: int = 0) -> bool | None:
        """True/False when the compute capability is known, None when it is not."""
        return None if self.compute_capability is None else self.compute_capability >= (major, minor)

    def cpus_per_rank(self) -> int | None:
        """Logical CPUs each rank of a host can use (at least 1), or None when unknown."""
        return None if self.cpu_count is None else max(1, self.cpu_count // max(1, self.ranks_per_host))

    def to_dict(self) -> dict[str, Any]:
        """The context as JSON-ready values (the capability as ``"7.0"``)."""
        cc = self.compute_capability
        return {"gpu_name": self.gpu_name, "compute_capability": None if cc is None else f"{cc[0]}.{cc[1]}",
                "gpu_memory_bytes": self.gpu_memory_bytes, "gpu_present": self.gpu_present, "cpu_count": self.cpu_count,
                "ranks_per_host": self.ranks_per_host, "torch_version": self.torch_version,
                "cuda_version": self.cuda_version, "nccl_version": self.nccl_version, "backend": self.backend,
                "pcie_gen": self.pcie_gen, "pcie_width": self.pcie_width, "pcie_assumed": self.pcie_assumed}


def _capability(v: Any) -> tuple[int, int] | None:
    """``"7.0"``, ``7.0``, ``(7, 0)`` or ``[7, 0]`` as (major, minor); None when unreadable."""
    if isinstance(v, (list, tuple)) and len(v) == 2:
        parts = [str(x) for x in v]
    elif isinstance(v, (str, int, float)) and not isinstance(v, bool):
        parts = str(v).split(".") + ["0"]
    else:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def _first(*values: Any) -> Any:
    return next((v for v in values if v not in (None, "", {})), None)


def _kineto_device(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The GPU of an imported trace whose rank's device the importer could not tell (no GPU
    events to say which): its ``devices`` (Kineto ``deviceProperties``) when they are all one
    model, in the ``gpu`` entry's keys; {} otherwise."""
    devs = next((r["devices"] for r in ranks if isinstance(r.get("devices"), list) and r["devices"]), [])
    devs = [d for d in devs if isinstance(d, dict)]
    if not devs or len({(d.get("name"), d.get("computeMajor"), d.get("computeMinor")) for d in devs}) != 1:
        return {}
    d = devs[0]
    cc = f"{d['computeMajor']}.{d.get('computeMinor', 0)}" if d.get("computeMajor") is not None else None
    return {k: v for k, v in {"name": d.get("name"), "compute_capability": cc, "memory_bytes": d.get("totalGlobalMem")}.items() if v is not None}


def hardware_context(meta: dict[str, Any]) -> HardwareContext:
    """The :class:`HardwareContext` of a run from its metadata (``run.meta``: run.json with
    its ``ranks`` entries), taking the first rank entry that names a GPU."""
    ranks = [r for r in meta.get("ranks") or [] if isinstance(r, dict)]
    env = meta.get("environment") if isinstance(meta.get("environment"), dict) else {}
    facts = env.get("facts") if isinstance(env.get("facts"), dict) else {}
    gpus = facts.get("gpus") if isinstance(facts.get("gpus"), dict) else {}
    devices = [d for d in gpus.get("devices") or [] if isinstance(d, dict)]
    gpu = next((r["gpu"] for r in ranks if isinstance(r.get("gpu"), dict) and r["gpu"]), None) or \
        _kineto_device(ranks) or (devices[0] if devices else {})
    versions = next((r["versions"] for r in ranks if isinstance(r.get("versions"), dict) and r["versions"]), {})
    dist = next((r["distributed_info"] for r in ranks if isinstance(r.get("distributed_info"), dict)), {})
    present: bool | None = True if gpu else None
    if not gpu and gpus.get("available") is False:
        present = False
    hosts: dict[Any, int] = {}
    for r in ranks:
        hosts[r.get("host")] = hosts.get(r.get("host"), 0) + 1
    cpu = facts.get("cpu") if isinstance(facts.get("cpu"), dict) else {}
    nccl_env = ((facts.get("env") or {}).get("nccl") or {}) if isinstance(facts.get("env"), dict) else {}
    # The snapshot's entry of the rank's GPU (same UUID), else its first GPU: it has the PCIe link.
    device = next((d for d in devices if gpu.get("uuid") and d.get("uuid") == gpu.get("uuid")), devices[0] if devices else {})
    pcie = device.get("pcie") if isinstance(device.get("pcie"), dict) else {}
    return HardwareContext(
        gpu_name=_first(gpu.get("name")),
        compute_capability=_capability(_first(gpu.get("capability"), gpu.get("compute_capability"))),
        gpu_memory_bytes=_int(_first(gpu.get("total_memory_bytes"), gpu.get("memory_bytes"), gpu.get("memory_total_bytes"))),
        gpu_present=present,
        cpu_count=_int(_first(cpu.get("count"), env.get("cpu_count"))),
        ranks_per_host=max(hosts.values()) if hosts else 1,
        torch_version=_first(versions.get("torch")),
        cuda_version=_first(versions.get("cuda")),
        nccl_version=_first(versions.get("nccl"), dist.get("nccl_version"), nccl_env.get("NCCL_VERSION")),
        backend=_first(dist.get("backend")),
        pcie_gen=_int(pcie.get("gen")) or _pcie_gen_of(cc := _capability(_first(gpu.get("capability"), gpu.get("compute_capability")))),
        pcie_width=_int(pcie.get("width")) or (16 if _pcie_gen_of(cc) else None),
        pcie_assumed=_int(pcie.get("gen")) is None and _pcie_gen_of(cc) is not None,
    )


# The PCIe generation of the data-centre GPUs of each architecture (V100: Gen3, A100/L40: Gen4,
# H100/H200: Gen5, B200: Gen5/6 taken as 5), all x16: the link a run that does not record it
# most likely had.  Jetson (8.7) and unknown capabilities: None.
PCIE_GEN_BY_CAPABILITY: dict[tuple[int, int], int] = {(7, 0): 3, (7, 5): 3, (8, 0): 4, (8, 6): 4, (8, 9): 4, (9, 0): 5, (10, 0): 5}


def _pcie_gen_of(cc: tuple[int, int] | None) -> int | None:
    return PCIE_GEN_BY_CAPABILITY.get(cc) if cc is not None else None


__all__ = ["HardwareContext", "hardware_context"]
