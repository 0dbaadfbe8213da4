"""The one profiler recording this process, forked children, and the recorder's warnings."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfscope.recorder.profiler import Profiler


class PerfscopeWarning(UserWarning):
    """A collector could not record something; the run goes on without it."""


# The recording profiler; read on hot paths (annotate), so a plain module attribute.
ACTIVE: Profiler | None = None
LOCK = threading.RLock()


def active_profiler() -> Profiler | None:
    """Return the profiler recording in this process, if any."""
    return ACTIVE


def set_active(prof: Profiler | None) -> None:
    """Make ``prof`` the recording profiler (None: none); callers hold :data:`LOCK`."""
    global ACTIVE
    ACTIVE = prof


def user_stacklevel() -> int:
    """The warnings.warn stacklevel of the first frame outside perfscope (the user's call)."""
    import perfscope
    import perfscope.collectors

    ours = (*(str(Path(p).resolve()) for p in perfscope.__path__), *(str(Path(p).resolve()) for p in perfscope.collectors.__path__))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and (frame.f_code.co_filename.startswith(ours) or "importlib" in frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _after_fork_in_child() -> None:
    p = ACTIVE
    if p is not None:
        p._become_inert()
    set_active(None)


if hasattr(os, "register_at_fork"):
    # DataLoader workers (fork start method) inherit the patched hooks and buffers: make
    # them record nothing, since the parent process owns this rank's shard.
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["PerfscopeWarning", "active_profiler", "set_active", "user_stacklevel", "ACTIVE", "LOCK"]
