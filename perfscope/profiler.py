"""In-process recording: the public names, kept here for ``from perfscope.profiler import ...``.

The implementation lives in :mod:`perfscope.recorder` (:mod:`.recorder.profiler`,
:mod:`.recorder.annotate`, :mod:`.recorder.state`).
"""
from __future__ import annotations

from perfscope._steps import Schedule
from perfscope.recorder.annotate import annotate
from perfscope.recorder.profiler import Profiler, profile
from perfscope.recorder.state import PerfscopeWarning, active_profiler

__all__ = ["profile", "annotate", "Profiler", "Schedule", "PerfscopeWarning", "active_profiler"]
