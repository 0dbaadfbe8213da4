"""The ``operators`` table: a trace's host operators and Python frames, nested per thread.

Both import routes hand :func:`operators_table` the same columns in the same order (per
chunk of the trace, its ``cpu_op`` events, then its ``python_function`` ones), and it
does the rest once for both, so that their tables are equal by construction:

* **Order.**  Rows are sorted by thread (pid, tid), then start ascending and end
  descending (an enclosing row before what it encloses; ties keep the input order): each
  thread's rows in preorder.  Rows with a negative duration come last (the importer drops
  them afterwards, which then moves no other row).
* **Nesting.**  A row's ``parent`` is the innermost row of its thread that contains it
  (the nearest earlier row whose end is at or after its own end: one that only overlaps it
  is not a parent), its ``depth`` the number of rows above it.  Operators and Python
  frames nest together, as ``torch.profiler`` shows them, so self time (duration less the
  children's) is computed the same way for both (``analyzers/operators.py``).
* **Call site.**  A row's ``call_site`` is the name of its innermost enclosing *user*
  Python frame: a ``python_function`` named ``file.py(123): fn`` whose file is not under
  ``torch/``, ``site-packages``, ``dist-packages`` or ``lib/pythonX.Y`` (
  :func:`is_user_frame`).  Traces recorded without ``with_stack`` have no frames, and
  every call site is null.

The nesting is one pass with a stack: ``kc_nest`` in the native library when it loads,
else :func:`_nest_python` (the same rule, tested against each other).
"""
from __future__ import annotations

import ctypes
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfscope.store.arrays import from_numpy, int_values, str_array
from perfscope.store.kineto import prefilter

#: ``kind`` of operator rows and of Python frame rows.
OPERATOR, FRAME = "cpu_op", "python_function"
_FRAME_RE = re.compile(r"^(?P<file>.+?\.py)\(\d+\): ")
_INTERNAL_FILE_RE = re.compile(r"(?:^|[/\\])(?:torch|site-packages|dist-packages|python\d[\d.]*)[/\\]|^<")


def is_user_frame(name: str) -> bool:
    """True for a Python frame name of the user's own code: ``file.py(123): fn`` with a
    file outside PyTorch, installed packages and the standard library (``torch/...``,
    ``.../site-packages/...``, ``.../lib/python3.10/...``); False for those and for frames
    that are no file line (``<built-in method ...>``, ``nn.Module: Linear_0``)."""
    m = _FRAME_RE.match(name)
    return m is not None and _INTERNAL_FILE_RE.search(m.group("file")) is None


def operators_table(start: np.ndarray, dur: np.ndarray, pid: pa.Array, tid: pa.Array, names: pa.Array,
                    is_frame: np.ndarray, external_id: pa.Array) -> dict[str, Any]:
    """The ``operators`` table (see :mod:`perfscope.store.schema`) from one rank's
    operator and frame events, in the importer's order (see the module docstring).

    Args:
        start: int64 ns (base included); dur: int64 ns.
        pid, tid: int64 Arrow arrays (nulls allowed).
        names: the events' names (Arrow strings).
        is_frame: True for ``python_function`` rows.
        external_id: int64 Arrow array (``args."External id"``; nulls allowed).

    Returns:
        column name -> column, rows sorted and nested as the module docstring says.
    """
    n = len(start)
    negative = dur < 0
    pid_key, tid_key = _key(pid), _key(tid)
    end = start + np.where(negative, 0, dur)
    order = np.lexsort((-end, start, tid_key, pid_key, negative))
    pid_key, tid_key, end, negative = pid_key[order], tid_key[order], end[order], negative[order]
    thread = np.zeros(n, np.int64)
    if n > 1:
        thread[1:] = np.cumsum((pid_key[1:] != pid_key[:-1]) | (tid_key[1:] != tid_key[:-1]))
    taken = from_numpy(order)
    names = names.take(taken)
    is_frame = is_frame[order]
    is_site = is_frame & _user_frames(names)
    parent, depth, site = nest(thread, end, is_site, negative)
    return {
        "start_ns": start[order], "dur_ns": dur[order],
        "pid": pid.take(taken), "tid": tid.take(taken),
        "name": names,
        "kind": str_array([OPERATOR, FRAME]).take(from_numpy(is_frame.astype(np.int64))),
        "external_id": external_id.take(taken),
        "depth": from_numpy(depth),
        "parent": from_numpy(parent, pa.int64(), parent >= 0),
        "call_site": names.take(from_numpy(np.maximum(site, 0), pa.int64(), site >= 0)),
    }


def _key(ids: pa.Array) -> np.ndarray:
    """An int64 array of ``ids`` with nulls as the smallest int64 (a group of their own)."""
    return int_values(ids, int(np.iinfo(np.int64).min)).astype(np.int64, copy=False)


def _user_frames(names: pa.Array) -> np.ndarray:
    """Bool per row of ``names``: :func:`is_user_frame` (decided once per distinct name)."""
    if not len(names):
        return np.zeros(0, bool)
    encoded = pc.dictionary_encode(names)
    flags = np.array([is_user_frame(s) if s is not None else False for s in encoded.dictionary.to_pylist()], bool)
    return flags[int_values(encoded.indices)] if len(flags) else np.zeros(len(names), bool)


def nest(thread: np.ndarray, end: np.ndarray, is_site: np.ndarray, skip: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parent, depth, site) of rows in preorder per thread (see ``kc_nest`` in
    ``columns.c``): parent and site are row indices, -1 where none; depth int32."""
    n = len(end)
    lib = _load()
    if lib is None:
        return _nest_python(thread, end, is_site, skip)
    parent, site, stack = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(max(n, 1), np.int64)
    depth = np.empty(n, np.int32)
    thread, end = np.ascontiguousarray(thread, np.int64), np.ascontiguousarray(end, np.int64)
    flags = np.ascontiguousarray(is_site, np.uint8), np.ascontiguousarray(skip, np.uint8)
    lib.kc_nest(n, thread.ctypes.data, end.ctypes.data, flags[0].ctypes.data, flags[1].ctypes.data,
                parent.ctypes.data, depth.ctypes.data, site.ctypes.data, stack.ctypes.data)
    return parent, depth, site


def _nest_python(thread: np.ndarray, end: np.ndarray, is_site: np.ndarray, skip: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`nest` without the native library (the same rule, one row at a time)."""
    n = len(end)
    parent, depth, site = [-1] * n, [0] * n, [-1] * n
    ends, threads, sites, skips = end.tolist(), thread.tolist(), is_site.tolist(), skip.tolist()
    stack: list[int] = []
    for i in range(n):
        if i and threads[i] != threads[i - 1]:
            stack.clear()
        if skips[i]:
            continue
        e = ends[i]
        while stack and ends[stack[-1]] < e:
            stack.pop()
        if stack:
            p = stack[-1]
            parent[i], depth[i] = p, depth[p] + 1
            site[i] = p if sites[p] else site[p]
        stack.append(i)
    return np.array(parent, np.int64), np.array(depth, np.int32), np.array(site, np.int64)


_lib: ctypes.CDLL | None = None
_load_failed = False


def _load() -> ctypes.CDLL | None:
    """The native library with ``kc_nest``, loaded once, or None."""
    global _lib, _load_failed
    if _lib is not None or _load_failed:
        return _lib
    path = prefilter.library_path()
    try:
        lib = ctypes.CDLL(str(path)) if path is not None else None
        if lib is not None:
            lib.kc_nest.restype = ctypes.c_int
            lib.kc_nest.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 8
    except (OSError, AttributeError):
        lib = None
    _lib, _load_failed = lib, lib is None
    return lib


def use_native(enabled: bool) -> None:
    """Use ``kc_nest`` (True, when it loads) or the Python fallback (False); for tests."""
    global _lib, _load_failed
    _lib, _load_failed = None, not enabled


__all__ = ["FRAME", "OPERATOR", "is_user_frame", "nest", "operators_table", "use_native"]
