"""perfscope's optional native libraries: which are built here, and how to get the missing ones.

Each is a plain C shared library loaded with ctypes and built at install time when a C
compiler works (``setup.py``); an install without a compiler skips them.  Importing,
analysing, reporting and comparing never need them; recording on a GPU does.
``perfscope doctor`` shows :func:`check`'s result.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfscope.collectors.host.checks import Result, result
from perfscope.errors import PerfscopeError

CHECK_ID = "perfscope.native"

#: How to get a missing library (said by the doctor and by the collectors that need one).
INSTALL_HINT = (
    "install a prebuilt perfscope wheel for this platform (`pip install --force-reinstall --no-deps "
    "--only-binary perfscope perfscope`), or install a C compiler (gcc or clang) and rebuild from source "
    "(`pip install --force-reinstall --no-deps --no-binary perfscope perfscope`; in a checkout: `pip install -e .`)"
)


@dataclass(frozen=True)
class NativePart:
    """One native library.

    Attributes:
        name: what it is, for people.
        locate: ``"module:function"``: the function returns the library's path, or None or
            raises a :class:`PerfscopeError` when it is not built.
        without: what perfscope does without it.
        for_recording: ``perfscope record`` needs it (it serves CUPTI or NCCL, so it is
            built on Linux only, where they exist); the others only make things faster.
    """

    name: str
    locate: str
    without: str
    for_recording: bool


PARTS: tuple[NativePart, ...] = (
    NativePart("NCCL profiler plugin", "perfscope.collectors.nccl:plugin_path",
               "`perfscope record` captures no NCCL collectives", for_recording=True),
    NativePart("CUPTI buffer sink", "perfscope.collectors.cupti.native:library_path",
               "`perfscope record` cannot capture GPU activity", for_recording=True),
    NativePart("Kineto filter", "perfscope.store.kineto.prefilter:library_path",
               "importing torch.profiler traces takes longer (pure-Python route, same tables)", for_recording=False),
)


def library_path(part: NativePart) -> Path | None:
    """Return where ``part``'s built library is, or None when it is not built."""
    module, _, function = part.locate.partition(":")
    locate: Any = getattr(importlib.import_module(module), function)
    try:
        path = locate()
    except PerfscopeError:
        return None
    return Path(path) if path is not None else None


def check() -> Result:
    """Return the doctor's ``perfscope.native`` result (``{id, status, message, fix}``).

    The message names each library that applies to this platform and is not built, with
    what perfscope does without it; the status is ``warn`` when recording needs one of
    them (the recorder stores this result in ``run.json``, where it explains a run without
    GPU or NCCL events), else ``pass``.
    """
    parts = [p for p in PARTS if sys.platform.startswith("linux") or not p.for_recording]
    missing = [p for p in parts if library_path(p) is None]
    if not missing:
        names = ", ".join(p.name for p in parts)
        return result(CHECK_ID, "pass", f"native libraries built: {names}")
    said = "; ".join(f"{p.name} not built: {p.without}" for p in missing)
    status = "warn" if any(p.for_recording for p in missing) else "pass"
    return result(CHECK_ID, status, said, INSTALL_HINT)


__all__ = ["CHECK_ID", "INSTALL_HINT", "PARTS", "NativePart", "check", "library_path"]
