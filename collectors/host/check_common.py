"""What every doctor check shares: the result shape, severities and fact accessors."""
from __future__ import annotations

from typing import Any

Facts = dict[str, Any]
Result = dict[str, str]
STATUSES = ("pass", "warn", "fail", "skip")
_RANK = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}

MiB = 1 << 20
GiB = 1 << 30


def result(check_id: str, status: str, message: str, fix: str = "") -> Result:
    """Return one check result; ``message`` is folded onto one line."""
    assert status in STATUSES, status
    return {"id": check_id, "status": status, "message": " ".join(message.split()), "fix": fix}


def worst(statuses: list[str]) -> str:
    """Return the most severe of ``statuses`` (fail > warn > pass); ``pass`` for none."""
    return max(statuses, key=lambda s: _RANK[s], default="pass")


def gpu_devices(facts: Facts) -> tuple[list[dict[str, Any]], str | None]:
    """Return (GPU device facts, None) or ([], the reason there are none)."""
    g = facts.get("gpus") or {}
    devices = g.get("devices") or []
    if not devices:
        if g.get("reason") and not g.get("available"):
            return [], "no GPU visible to NVML (gpu.driver says why)"
        return [], g.get("reason") or "no GPU facts in this snapshot"
    return devices, None


def gpu_name(d: dict[str, Any]) -> str:
    return f"GPU{d.get('index')}"


def numa_nodes(facts: Facts) -> list[dict[str, Any]]:
    return ((facts.get("numa") or {}).get("nodes")) or []


def ib_devices(facts: Facts) -> list[dict[str, Any]]:
    return ((facts.get("infiniband") or {}).get("devices")) or []


def size_text(n: int) -> str:
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n >> 10} KiB"
