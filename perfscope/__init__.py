"""perfscope: where did my GPU training step time go, and what should I change?

Public API (everything else is internal):

* :func:`open_run` - open a recorded or imported run for reading (``Run.table(...)``).
* :func:`analyze` - analyse a run directory, an open run or a Kineto trace file.
* :func:`profile` - record in-process: ``with perfscope.profile("runs/exp1") as prof: ...``.
* :func:`annotate` - an NVTX range that lands in the ``markers`` table.
* :func:`chrome_window_trace` - a time window of some ranks as Chrome trace JSON bytes.
* :class:`PerfscopeError` - base of every error perfscope raises.
"""
from __future__ import annotations

from typing import Any

from perfscope.errors import PerfscopeError

__version__ = "0.1.0"

# Imported on first use so that `import perfscope` stays cheap (no torch, no CUPTI, no pandas,
# no pyarrow: `perfscope --help` imports this module and nothing else of perfscope).
_LAZY = {
    "open_run": "perfscope.store",
    "analyze": "perfscope.pipeline",
    "profile": "perfscope.profiler",
    "annotate": "perfscope.profiler",
    "Profiler": "perfscope.profiler",
    "Schedule": "perfscope.profiler",
    "chrome_window_trace": "perfscope.store.window_export",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'perfscope' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__ (annotate sits on hot paths)
    return value


__all__ = ["PerfscopeError", "Profiler", "Schedule", "__version__", "analyze", "annotate", "chrome_window_trace",
           "open_run", "profile"]
