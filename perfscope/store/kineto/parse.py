"""What Kineto event names say: memcpy and memset kinds, sync kinds, NCCL kernels, steps."""
from __future__ import annotations

import re
from typing import Any

_COPY_KINDS = {
    "htod": "H2D", "dtoh": "D2H", "dtod": "D2D", "ptop": "P2P", "htoh": "H2H",
    "htoa": "H2D", "atoh": "D2H", "atod": "D2D", "dtoa": "D2D", "atoa": "D2D",
}
_MEM_KINDS = {
    "pageable": "pageable", "pinned": "pinned", "device": "device", "managed": "managed",
    "array": "array", "device static": "device", "managed static": "managed", "unknown": "unknown",
}
_MEMCPY_RE = re.compile(r"^\s*memcpy\s+(\w+)(?:\s*\(\s*([^)]*?)\s*->\s*([^)]*?)\s*\))?", re.IGNORECASE)
_PAREN_RE = re.compile(r"\(\s*([^)]*?)\s*\)")


def parse_memcpy_name(name: str) -> tuple[str, str, str, bool]:
    """Parse a Kineto memcpy name such as ``"Memcpy HtoD (Pageable -> Device)"``.

    Returns:
        (copy_kind, src_kind, dst_kind, pageable): copy_kind is H2D, D2H, D2D, P2P, H2H or
        ``other``; memory kinds are pageable, pinned, device, managed, array or ``unknown``;
        pageable is true when either side is pageable host memory.
    """
    m = _MEMCPY_RE.match(name or "")
    if not m:
        return "other", "unknown", "unknown", False
    copy_kind = _COPY_KINDS.get(m.group(1).lower(), "other")
    src = _MEM_KINDS.get((m.group(2) or "unknown").strip().lower(), "unknown")
    dst = _MEM_KINDS.get((m.group(3) or "unknown").strip().lower(), "unknown")
    if m.group(2) is None:
        # No "(src -> dst)": the direction still tells which side is device memory.
        src = "device" if copy_kind in ("D2H", "D2D", "P2P") else "unknown"
        dst = "device" if copy_kind in ("H2D", "D2D", "P2P") else "unknown"
    return copy_kind, src, dst, "pageable" in (src, dst)


def parse_memset_kind(name: str) -> str:
    """``"Memset (Device)"`` -> ``device``; unknown when the name gives no kind."""
    m = _PAREN_RE.search(name or "")
    return _MEM_KINDS.get(m.group(1).strip().lower(), "unknown") if m else "unknown"


_SYNC_KINDS = {
    "stream sync": "stream", "stream synchronize": "stream", "event sync": "event",
    "event synchronize": "event", "context sync": "context", "device sync": "context",
    "device synchronize": "context", "stream wait event": "stream_wait_event",
}


def parse_sync_kind(kind_arg: Any, name: Any) -> str:
    """Map Kineto's ``cuda_sync_kind`` (or the event name) to stream, event, context,
    stream_wait_event or unknown."""
    for text in (kind_arg, name):
        if isinstance(text, str):
            k = _SYNC_KINDS.get(text.strip().lower())
            if k:
                return k
    return "unknown"


_ALGOS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS", "RING", "TREE", "PAT")
_PROTOS = ("LL128", "LL", "SIMPLE")
_NCCL_KERNEL_RE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


def parse_nccl_kernel(name: str) -> tuple[str | None, str | None, str | None]:
    """Parse ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` or
    ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``.

    Returns:
        (func, algorithm, protocol), each None when the name does not say.
    """
    base = (name or "").split("(", 1)[0]
    m = _NCCL_KERNEL_RE.search(base)
    func = m.group(1) if m else None
    if func is not None and func.lower() == "generic":
        func = None
    tokens = base.split("_")
    joined = "_" + base.upper() + "_"
    algo = next((a for a in _ALGOS if f"_{a}_" in joined), None)
    proto = next((p for p in _PROTOS if p in tokens), None)
    return func, algo, proto


def is_nccl_kernel(name: str) -> bool:
    """True for NCCL's device kernels (``ncclKernel_*``, ``ncclDevKernel_*``)."""
    return "nccl" in name.lower() if name else False


STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
