"""What a recording process says about itself in ``ranks/rank-N.json``.

Nothing here initialises CUDA: GPU facts are read only once torch has been imported and
has created its CUDA context (so a user's ``CUDA_VISIBLE_DEVICES`` set after start-up still
applies).
"""
from __future__ import annotations

import platform
import sys
from typing import Any


def imported_torch() -> Any:
    """Return the torch module once its import has finished (None before or while importing).

    The flusher thread calls this while the main thread may be halfway through
    ``import torch``; touching a half-initialised torch from another thread can deadlock
    on the import lock or see missing attributes.
    """
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None
    return torch


def torch_cuda_ready() -> bool:
    """True when torch is imported and has already initialised CUDA in this process."""
    torch = imported_torch()
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - half-imported or CPU-only torch
        return False


def gpu_info() -> dict[str, Any]:
    """Return the current CUDA device's facts (empty until torch has initialised CUDA).

    Returns:
        ``{"index", "name", "uuid", "total_memory_bytes", "capability"}``.
    """
    if not torch_cuda_ready():
        return {}
    import torch

    try:
        idx = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
    except Exception:  # noqa: BLE001
        return {}
    info: dict[str, Any] = {"index": int(idx), "name": str(props.name)}
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        info["uuid"] = text if text.startswith("GPU-") else f"GPU-{text}"
    info["total_memory_bytes"] = int(getattr(props, "total_memory", 0) or 0)
    info["capability"] = f"{props.major}.{props.minor}"
    return info


def versions() -> dict[str, Any]:
    """Return the versions that matter for reading a trace (python always; jax once it is
    imported; torch, its CUDA and NCCL once torch is imported; the CUDA driver when torch
    has initialised CUDA)."""
    out: dict[str, Any] = {"python": platform.python_version()}
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(getattr(jax, "__version__", None), str):  # read, never imported here
        out["jax"] = jax.__version__
    torch = imported_torch()
    if torch is None:
        return out
    out["torch"] = str(getattr(torch, "__version__", ""))
    try:
        out["cuda"] = torch.version.cuda
    except Exception:  # noqa: BLE001
        pass
    try:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_nccl_available():
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - CPU builds have no NCCL
        pass
    if torch_cuda_ready():
        try:
            v = torch._C._cuda_getDriverVersion()  # e.g. 13000
            out["driver_cuda"] = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:  # noqa: BLE001
            pass
    return out


__all__ = ["gpu_info", "versions", "torch_cuda_ready", "imported_torch"]
