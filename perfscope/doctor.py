"""The environment doctor: a snapshot of the machine plus the checks over it.

:func:`diagnose` returns ``{"facts": ..., "checks": [...]}``; the recorder stores the same
document in ``run.json`` under ``environment`` (through :func:`environment_for_run`), and the
analyzers' rules read ``run.meta["environment"]["checks"]``.
"""
from __future__ import annotations

import time
from typing import Any

from perfscope import native
from perfscope.collectors.host.checks import run_checks, summarize
from perfscope.collectors.host.environment import snapshot


def diagnose(**snapshot_kwargs: Any) -> dict[str, Any]:
    """Take a snapshot and run every check over it.

    Args:
        snapshot_kwargs: passed to :func:`perfscope.collectors.host.environment.snapshot`
            (``proc``, ``sys``, ``nvml``, ``env``, ``etc``, ``dev``) to read other roots.

    Returns:
        ``{"facts": dict, "checks": [{id, status, message, fix}, ...], "summary":
        {pass, warn, fail, skip}}``; the last check says which of perfscope's native
        libraries are missing here (:func:`perfscope.native.check`).
    """
    facts = snapshot(**snapshot_kwargs)
    checks = [*run_checks(facts), native.check()]
    return {"facts": facts, "checks": checks, "summary": summarize(checks)}


def environment_for_run() -> dict[str, Any]:
    """Return the environment document the recorder stores in ``run.json``.

    Never raises: a recorder must not fail because the machine could not be described;
    the reason is kept under ``facts.errors`` instead.
    """
    try:
        return diagnose()
    except Exception as e:  # noqa: BLE001 - see docstring
        return {
            "facts": {"collected_ns": time.time_ns(), "errors": [f"snapshot: {type(e).__name__}: {e}"]},
            "checks": [],
            "summary": summarize([]),
        }


def failed(doc: dict[str, Any]) -> bool:
    """True when any check in ``doc`` (from :func:`diagnose`) failed."""
    return any(c.get("status") == "fail" for c in doc.get("checks", []))


__all__ = ["diagnose", "environment_for_run", "failed"]
