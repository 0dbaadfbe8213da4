"""The ``operators`` table: a trace's host operators and Python frames, nested per thread.

Both import routes put the same rows (per chunk of the trace, its ``cpu_op`` events, then
its ``python_function`` ones) in the same order (:func:`preorder`), and
:func:`operators_table` does the rest once for both, so that their tables are equal by
construction:

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
from typing import Any, cast

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


#: The thread key of a null pid or tid (a group of its own).
NULL_KEY = int(np.iinfo(np.int64).min)


def preorder(start: np.ndarray, dur: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """The order of :func:`operators_table`'s rows (see the module docstring): by thread
    (``pid``, ``tid``: int64 keys, :data:`NULL_KEY` for null), start ascending, end
    descending, input order on ties; negative durations last."""
    negative = dur < 0
    return np.lexsort((-(start + np.where(negative, 0, dur)), start, tid, pid, negative))


def thread_key(ids: pa.Array) -> np.ndarray:
    """``ids`` (an int64 Arrow array) as :func:`preorder`'s keys: nulls as :data:`NULL_KEY`."""
    return int_values(ids, NULL_KEY).astype(np.int64, copy=False)


def sorted_operators_table(start: np.ndarray, dur: np.ndarray, pid: pa.Array, tid: pa.Array, names: pa.Array,
                           is_frame: np.ndarray, external_id: pa.Array) -> dict[str, Any]:
    """:func:`operators_table` of rows in any order (put in :func:`preorder` first)."""
    order = preorder(start, dur, thread_key(pid), thread_key(tid))
    taken = from_numpy(order)
    return operators_table(start[order], dur[order], pid.take(taken), tid.take(taken), names.take(taken),
                           is_frame[order], external_id.take(taken))


def operators_table(start: np.ndarray, dur: np.ndarray, pid: pa.Array, tid: pa.Array, names: pa.Array,
                    is_frame: np.ndarray, external_id: pa.Array) -> dict[str, Any]:
    """The ``operators`` table (see :mod:`perfscope.store.schema`) from one rank's
    operator and frame events, in :func:`preorder`.

    Args:
        start: int64 ns (base included); dur: int64 ns.
        pid, tid: int64 Arrow arrays (nulls allowed).
        names: the events' names (Arrow strings).
        is_frame: True for ``python_function`` rows.
        external_id: int64 Arrow array (``args."External id"``; nulls allowed).

    Returns:
        column name -> column: the rows as given, with ``kind``, ``depth``, ``parent``
        and ``call_site`` (see the module docstring).
    """
    n = len(start)
    pid_key, tid_key = thread_key(pid), thread_key(tid)
    thread = np.zeros(n, np.int64)
    if n > 1:
        thread[1:] = np.cumsum((pid_key[1:] != pid_key[:-1]) | (tid_key[1:] != tid_key[:-1]))
    negative = dur < 0
    end = start + np.where(negative, 0, dur)
    parent, depth, site = nest(thread, end, _user_frames(names, is_frame), negative)
    has_site = site >= 0
    return {
        "start_ns": start, "dur_ns": dur, "pid": pid, "tid": tid, "name": names,
        "kind": cast(pa.Array, str_array([OPERATOR, FRAME])).take(from_numpy(is_frame.astype(np.int64))),
        "external_id": external_id,
        "depth": from_numpy(depth),
        "parent": from_numpy(parent, pa.int64(), parent >= 0),
        "call_site": (names.take(from_numpy(np.maximum(site, 0), pa.int64(), has_site)) if has_site.any()
                      else pa.nulls(n, pa.string())),
    }


def _user_frames(names: pa.Array, is_frame: np.ndarray) -> np.ndarray:
    """Bool per row of ``names``: a Python frame (``is_frame``) of the user's code
    (:func:`is_user_frame`, decided once per distinct name)."""
    out = np.zeros(len(names), bool)
    frames = np.flatnonzero(is_frame)
    if not frames.size:  # (traces recorded without with_stack: most)
        return out
    encoded = pc.dictionary_encode(names.take(from_numpy(frames)))
    flags = np.array([is_user_frame(s) if s is not None else False for s in encoded.dictionary.to_pylist()], bool)
    out[frames] = flags[int_values(encoded.indices)]
    return out


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


__all__ = ["FRAME", "NULL_KEY", "OPERATOR", "is_user_frame", "nest", "operators_table", "preorder", "sorted_operators_table",
           "thread_key", "use_native"]
