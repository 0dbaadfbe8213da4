"""ctypes binding of the native buffer sink (``sink.c``, built as ``_sink*.so``).

ctypes releases the GIL around every call, so draining and flushing never block the
training thread's Python for longer than a memcpy.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from perfscope.collectors.cupti import layouts
from perfscope.errors import CuptiUnavailableError

#: names of ps_stats() values after the two per-kind blocks
STAT_NAMES = ("dropped_cupti", "dropped_sink", "api_filtered", "buffers", "buffers_refused",
              "valid_bytes", "callback_ns", "callback_ns_max", "outstanding_buffers", "strings",
              "strings_dropped", "peak_pending_bytes", "peak_outstanding_buffers", "buffer_bytes", "segments",
              "segment_bytes", "segment_errors", "dropped_segment_write", "segment_write_ns",
              "segment_write_ns_max", "segment_errno")
MAX_KIND = 64

_lib: ctypes.CDLL | None = None
_override: Path | None = None


def use_library(path: str | os.PathLike[str] | None) -> None:
    """Load ``path`` instead of the built sink (the recorder passes ``PERFSCOPE_CUPTI_SINK``);
    None goes back to the built one.  Takes effect before the first :func:`load`."""
    global _override
    _override = Path(path) if path else None


def library_path() -> Path | None:
    """Return the sink library to load (the :func:`use_library` one first), or None."""
    if _override is not None:
        return _override
    here = Path(__file__).resolve().parent
    dirs = [here]
    try:
        import perfscope.collectors.cupti as pkg

        dirs += [Path(p) for p in pkg.__path__]
    except ImportError:  # pragma: no cover - only while the package itself is importing
        pass
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            p = d / f"_sink{suffix}"
            if p.exists():
                return p
        hits = sorted(d.glob("_sink*.so"))
        if hits:
            return hits[0]
    return None


def load() -> ctypes.CDLL:
    """Load the sink once and declare its functions.

    Raises:
        CuptiUnavailableError: the sink was not built (the message says how to get it:
            :data:`perfscope.native.INSTALL_HINT`).
    """
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if path is None:
        from perfscope.native import INSTALL_HINT

        raise CuptiUnavailableError(f"perfscope's native CUPTI sink is not built; {INSTALL_HINT}")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise CuptiUnavailableError(f"cannot load the native CUPTI sink {path}: {e}; rebuild it for this machine") from None
    u8p, u64p = ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint64)
    sigs = {
        "ps_open": (ctypes.c_int, [ctypes.c_char_p]),
        "ps_error": (ctypes.c_char_p, []),
        "ps_configure": (ctypes.c_int, [ctypes.c_int, ctypes.c_size_t, ctypes.c_long, ctypes.c_long]),
        "ps_set_api_filter": (None, [ctypes.c_int, u8p, ctypes.c_size_t]),
        "ps_set_limits": (None, [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t]),
        "ps_register": (ctypes.c_int, []),
        "ps_flush": (ctypes.c_int, [ctypes.c_uint32]),
        "ps_set_detached": (None, [ctypes.c_int]),
        "ps_timestamp": (ctypes.c_int, [u64p]),
        "ps_pending": (ctypes.c_size_t, [ctypes.c_int]),
        "ps_take": (ctypes.c_size_t, [ctypes.c_int, u8p, ctypes.c_size_t]),
        "ps_take_columns": (ctypes.c_size_t, [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
                                              ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_void_p),
                                              ctypes.c_size_t]),
        "ps_strings_pending": (ctypes.c_size_t, []),
        "ps_take_strings": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t, u64p]),
        "ps_stats": (ctypes.c_int, [u64p, ctypes.c_int]),
        "ps_reset": (None, []),
        "ps_feed_plain": (None, [u8p, ctypes.c_size_t]),
        "ps_test_request": (None, [ctypes.POINTER(u8p), ctypes.POINTER(ctypes.c_size_t)]),
        "ps_test_complete": (None, [u8p, ctypes.c_size_t, ctypes.c_size_t]),
        "ps_subscribe": (ctypes.c_int, []),
        "ps_enable_api": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint32), ctypes.c_size_t]),
        "ps_unsubscribe": (ctypes.c_int, []),
        "ps_api_switch": (ctypes.c_int, [ctypes.c_int]),
        "ps_api_stats": (None, [u64p]),
        "ps_managed_seen": (ctypes.c_int, []),
        "ps_test_api_call": (None, [ctypes.c_int, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint32]),
        "ps_test_api_half": (None, [ctypes.c_int, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int]),
        "ps_test_new_session": (None, []),
        "ps_seg_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t]),
        "ps_seg_cycle": (None, []),
        "ps_seg_stop": (None, []),
        "ps_seg_close": (ctypes.c_uint64, []),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    _lib = lib
    return lib


class Sink:
    """The process's one native sink (a thin, typed face over the ps_* functions)."""

    def __init__(self) -> None:
        self.lib = load()

    def open(self, libcupti: str) -> None:
        """Resolve CUPTI's entry points from ``libcupti`` (the file cupti-python loaded)."""
        if self.lib.ps_open(libcupti.encode()) != 0:
            raise CuptiUnavailableError(f"native CUPTI sink: {self.lib.ps_error().decode()}")

    def configure(self, kinds: Iterable[int]) -> None:
        """Keep records of these CUPTI kinds (sizes and string fields from :mod:`layouts`)."""
        for k in kinds:
            lay = layouts.LAYOUTS[k]
            offs = list(lay.string_offsets) + [-1, -1]
            if self.lib.ps_configure(k, lay.dtype.itemsize, offs[0], offs[1]) != 0:
                raise CuptiUnavailableError(f"native CUPTI sink refused kind {k}")

    def set_api_filter(self, runtime_cbids: Iterable[int], driver_cbids: Iterable[int]) -> None:
        """Keep only API records whose callback id is listed."""
        for which, ids in ((1, runtime_cbids), (0, driver_cbids)):
            mask = np.zeros(4096, np.uint8)
            mask[[i for i in ids if 0 <= i < 4096]] = 1
            self.lib.ps_set_api_filter(which, mask.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), mask.size)

    def set_limits(self, buffer_bytes: int, max_buffers: int, bucket_limit: int) -> None:
        self.lib.ps_set_limits(buffer_bytes, max_buffers, bucket_limit)

    def register(self) -> int:
        """Register the sink's buffer callbacks with CUPTI; returns the CUptiResult."""
        return int(self.lib.ps_register())

    def flush(self, forced: bool = False) -> int:
        """``cuptiActivityFlushAll`` (completed buffers are processed on this thread)."""
        return int(self.lib.ps_flush(1 if forced else 0))

    def set_detached(self, detached: bool) -> None:
        """While ``detached`` (CUPTI finalized between windows), the sink and its writer
        thread make no CUPTI call (one would attach CUPTI again); returns once a flush in
        progress has finished.  :meth:`reset` attaches again."""
        self.lib.ps_set_detached(1 if detached else 0)

    def timestamp(self) -> int:
        """``cuptiGetTimestamp()`` in ns."""
        out = ctypes.c_uint64(0)
        if self.lib.ps_timestamp(ctypes.byref(out)) != 0:
            raise CuptiUnavailableError("cuptiGetTimestamp failed")
        return int(out.value)

    def take(self, kind: int) -> np.ndarray:
        """Move kind's waiting records out of the sink as raw bytes (uint8 array)."""
        n = int(self.lib.ps_pending(kind))
        buf = np.empty(n, np.uint8)
        if n:
            got = self.lib.ps_take(kind, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), n)
            buf = buf[:got]
        return buf

    def take_columns(self, kind: int) -> dict[str, np.ndarray]:
        """Move kind's waiting records out as one contiguous array per field of its dtype.

        The transposition runs in C (GIL released), one pass over the records.
        """
        dtype = layouts.LAYOUTS[kind].dtype
        names = list(dtype.names or ())
        n = int(self.lib.ps_pending(kind)) // dtype.itemsize
        cols = {f: np.empty(n, dtype[f]) for f in names}
        if n == 0:
            return cols
        nf = len(names)
        fields: Mapping[str, Any] = dtype.fields or {}
        offs = (ctypes.c_size_t * nf)(*[fields[f][1] for f in names])
        sizes = (ctypes.c_size_t * nf)(*[dtype[f].itemsize for f in names])
        outs = (ctypes.c_void_p * nf)(*[cols[f].ctypes.data for f in names])
        got = int(self.lib.ps_take_columns(kind, nf, offs, sizes, outs, n))
        if got < n:
            cols = {f: a[:got] for f, a in cols.items()}
        return cols

    def take_strings(self) -> tuple[bytes, int]:
        """New strings since the last call: (NUL-separated blob, id of the first one)."""
        n = int(self.lib.ps_strings_pending())
        if n == 0:
            return b"", -1
        buf = ctypes.create_string_buffer(n)
        first = ctypes.c_uint64(0)
        got = self.lib.ps_take_strings(buf, n, ctypes.byref(first))
        return buf.raw[:got], int(first.value)

    def stats(self) -> dict[str, Any]:
        """Counters: ``seen``/``kept`` per CUPTI kind (non-zero only) and the STAT_NAMES values."""
        out = (ctypes.c_uint64 * (2 * MAX_KIND + len(STAT_NAMES)))()
        self.lib.ps_stats(out, len(out))
        vals = list(out)
        seen = {k: v for k, v in enumerate(vals[:MAX_KIND]) if v}
        kept = {k: v for k, v in enumerate(vals[MAX_KIND:2 * MAX_KIND]) if v}
        res: dict[str, object] = {"seen": seen, "kept": kept}
        res.update(zip(STAT_NAMES, vals[2 * MAX_KIND:]))
        return res

    def reset(self) -> None:
        self.lib.ps_reset()

    # -- records written to segment files by the sink's own thread (see sink.c, segments.py) --
    def segments_open(self, folder: str | os.PathLike[str], clock_offset_ns: int, interval_s: float,
                      max_segment_bytes: int) -> None:
        """Write records to segment files in ``folder`` (which must exist) from now on: a C
        thread every ``interval_s`` (0: none; :meth:`segments_cycle` writes).

        Raises:
            CuptiUnavailableError: the sink already writes segments, or the folder is not writable.
        """
        ms = int(round(interval_s * 1000)) if interval_s > 0 else 0
        rc = self.lib.ps_seg_open(os.fsencode(folder), layouts.CUPTI_API_VERSION, int(clock_offset_ns), max(ms, 1 if ms else 0),
                                  int(max_segment_bytes))
        if rc != 0:
            raise CuptiUnavailableError(f"native CUPTI sink: {self.lib.ps_error().decode()}")

    def segments_cycle(self) -> None:
        """Write what the sink holds to segment files now (the thread does it every interval)."""
        self.lib.ps_seg_cycle()

    def segments_stop_thread(self) -> None:
        """Stop the writer thread (a cycle in progress finishes); :meth:`segments_close` writes the rest."""
        self.lib.ps_seg_stop()

    def segments_close(self) -> int:
        """Write what the sink holds and stop writing segments; returns the segments written."""
        return int(self.lib.ps_seg_close())

    # -- API records through CUPTI's callback API (see sink.c) --
    def subscribe(self) -> int:
        """Take CUPTI's subscriber slot with the sink's API callback.

        Returns:
            The CUptiResult: 0, 39 when another client holds the slot, or -1 when the
            loaded libcupti lacks the callback API.
        """
        return int(self.lib.ps_subscribe())

    def enable_api(self, domain: int, cbids: Iterable[int]) -> int:
        """Turn the callback on for these ids of ``domain`` (1 driver, 2 runtime).

        Returns:
            How many ids CUPTI refused.
        """
        ids = sorted(set(cbids))
        arr = (ctypes.c_uint32 * len(ids))(*ids)
        return int(self.lib.ps_enable_api(domain, arr, len(ids)))

    def switch_api(self, on: bool) -> int:
        """Turn the callbacks :meth:`enable_api` enabled off or back on (between a schedule's
        windows); returns how many ids CUPTI refused."""
        return int(self.lib.ps_api_switch(1 if on else 0))

    def test_api_half(self, domain: int, cbid: int, correlation_id: int, exit: bool) -> None:
        """Run only the enter (``exit`` false) or only the exit callback of one call (tests)."""
        self.lib.ps_test_api_half(domain, cbid, correlation_id, 1 if exit else 0)

    def test_new_session(self) -> None:
        """Start a new subscription session as :meth:`subscribe` does, without CUPTI (tests)."""
        self.lib.ps_test_new_session()

    def unsubscribe(self) -> int:
        """Give the subscriber slot back; returns the CUptiResult."""
        return int(self.lib.ps_unsubscribe())

    def managed_seen(self) -> bool:
        """Whether the API callback has seen the job allocate managed memory (ever, in this
        process): the sign to arm CUPTI's Unified Memory counters."""
        return bool(self.lib.ps_managed_seen())

    def api_stats(self) -> dict[str, int]:
        """``api_records`` made by the callback and ``api_dropped`` (staging full)."""
        out = (ctypes.c_uint64 * 2)()
        self.lib.ps_api_stats(out)
        return {"api_records": int(out[0]), "api_dropped": int(out[1])}

    def test_api_call(self, domain: int, cbid: int, correlation_id: int, ret: int = 0, nested_driver_cbid: int = 0) -> None:
        """Run the API callback's enter and exit for one call, as CUPTI would, with a
        driver call of ``nested_driver_cbid`` inside it when non-zero (tests)."""
        self.lib.ps_test_api_call(domain, cbid, correlation_id, ret, nested_driver_cbid)

    def feed_plain(self, buffer: bytes | np.ndarray) -> None:
        """Process a buffer of end-to-end records as if CUPTI had completed it (tests)."""
        arr = np.frombuffer(buffer, np.uint8) if not isinstance(buffer, np.ndarray) else buffer
        arr = np.ascontiguousarray(arr)
        self.lib.ps_feed_plain(arr.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), arr.size)
