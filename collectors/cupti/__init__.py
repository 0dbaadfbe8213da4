"""CUPTI activity collector: kernels, copies, memsets, syncs, launch/copy/sync API calls, NVTX.

Interface (used by ``perfscope.profile`` and ``perfscope record``)::

    available() -> tuple[bool, str]
        GPU, NVIDIA driver, cupti-python, a supported libcupti and the native sink all
        present?  ``(True, "")`` or ``(False, reason)``.  Initialises the driver (cuInit),
        creates no context.

    class CuptiCollector:
        def __init__(self, writer: RankWriter, *,
                     kinds=("kernel", "memcpy", "memset", "sync", "runtime", "driver", "nvtx"),
                     buffer_mb: int = 8, api_source: str | None = None): ...
        def start(self) -> None
            Raises CuptiUnavailableError (perfscope.errors) when CUPTI is absent or held by
            another client (torch.profiler recording, Nsight Systems).  Nothing stays
            enabled after the error.
        def flush(self) -> None
            cuptiActivityFlushAll(0), then hands the decoded rows to ``writer.append`` for
            the tables kernels, memcpy, memset, sync, api and markers.  Thread-safe; call it
            periodically (e.g. every writer flush interval).
        def stop(self) -> dict
            Synchronises the current context, flushes (forced), disables the kinds and
            returns statistics: rows per table, records seen/kept per kind, dropped counts,
            overhead (sink callback, decode, flush times; CUPTI OVERHEAD records), clock
            check, warnings.  Never calls cupti.finalize().
        clock_offset_ns: int
            0 when CUPTI timestamps are Unix-epoch ns (checked once at start by bracketing
            cupti.get_timestamp() between two CLOCK_REALTIME reads), else the offset added
            to every row written (store it in the rank metadata).
        warnings: list[str]
            problems seen while recording, for the rank metadata.

    nvtx_injection_env() -> dict[str, str]
        ``{"NVTX_INJECTION64_PATH": <the libcupti cupti-python loads>}`` for a child's
        environment ({} when none is found or another tool set it already).  start() also
        sets it in ``os.environ`` when ``nvtx`` is recorded and it is unset, which works
        when the process has made no NVTX call yet.

Extra kinds: ``driver`` (driver API launches/copies/syncs, e.g. Triton) and ``overhead``
(CUPTI's overhead records, summarised in the stop() statistics).

Design: a native sink (``sink.c``) owns CUPTI's buffer callbacks, copies records of the
enabled kinds into per-kind arrays and interns kernel and marker names, with no Python per
record.  Then either flush() drains whole arrays and decodes them with NumPy structured
dtypes (``layouts.py``, ``decode.py``), or, with ``segment_dir``, the sink's own C thread
writes them to segment files (``segments.py``) that a decoder in another process turns
into tables (``decoder.py``; the recorder's ``cupti_decode`` job collector,
``decoding.py``).  Built at install (``build.py``, exec'd by setup.py).
"""
from __future__ import annotations

from perfscope.collectors.cupti.collector import DEFAULT_KINDS, KINDS, CuptiCollector
from perfscope.collectors.cupti.probe import available, nvtx_injection_env
from perfscope.errors import CuptiUnavailableError

__all__ = ["available", "CuptiCollector", "nvtx_injection_env", "CuptiUnavailableError", "DEFAULT_KINDS", "KINDS"]
