"""The NCCL profiler plugin: a C library NCCL loads, and the Python that reads its output.

NCCL 2.27 through 2.30 load ``libperfscope_nccl*.so`` (it exports ``ncclProfiler_v4``,
``_v5`` and ``_v6``) when ``NCCL_PROFILER_PLUGIN`` names it.  It records NCCL's API calls,
every collective and point-to-point operation (sequence number, function, count, datatype,
root or peer, algorithm, protocol, channels, warps), per-channel GPU kernel start/stop and,
at higher levels, proxy operations and network steps, into one file per process.  See
``collectors/nccl/README.md`` for levels, variables, the file format and limits.

API for the recorder and ``perfscope.profile``:

``plugin_path() -> Path``
    Absolute path of the built plugin library.  Raises :class:`CollectorError` (saying how
    to build it) when it is missing.

``configure_env(env, out_dir, level=None) -> list[str]``
    Set ``NCCL_PROFILER_PLUGIN``, ``PERFSCOPE_NCCL_DIR`` and ``PERFSCOPE_NCCL_LEVEL`` in
    ``env`` (in place) for a job about to start; never overrides a user's own
    ``NCCL_PROFILER_PLUGIN``.  Returns warnings to show.  ``default_dir(run)`` is the
    suggested ``out_dir`` (``RUN/nccl_plugin``).

``ingest_dir(nccl_dir, run_path, ranks=None) -> dict[int, int]``
    After the job stopped: write the ``collectives``, ``nccl_channels`` and ``proxy``
    tables of every rank found in ``nccl_dir`` into the run; returns rows written per rank.

``summarize_dir(nccl_dir) -> dict[int, dict]``
    Per rank: ``dropped_events`` and plugin details for the rank metadata.

``flush_in_process() -> bool``
    When NCCL has loaded the plugin into *this* process: write what it has queued now (call
    it before an in-process ``ingest_dir``; the plugin otherwise writes every second and at
    communicator teardown).  False when the plugin is not loaded here.

``set_level_in_process(level) -> int | None``
    Change the level of every communicator of this process at run time (0 pauses; NCCL
    samples it per operation).  Returns the previous level, None when not loaded here.

Typical use by a launcher::

    env = dict(os.environ)
    warnings = configure_env(env, default_dir(run))
    subprocess.run(cmd, env=env)
    ingest_dir(default_dir(run), run)

Bandwidth (algbw/busbw with the nccl-tests factors) is computed by
``perfscope.analyzers.collectives`` from the ``collectives`` table.
"""
from __future__ import annotations

import ctypes
import os
import sysconfig
from pathlib import Path

from perfscope.collectors.nccl.env import configure_env, default_dir, ingest_dir, summarize_dir
from perfscope.errors import CollectorError

LIBRARY_STEM = "libperfscope_nccl"


def plugin_path() -> Path:
    """Return the absolute path of the built NCCL profiler plugin library.

    Raises:
        CollectorError: no built library next to this package (a source checkout that was
            not installed, or a platform without a C compiler at install time).
    """
    here = Path(__file__).resolve().parent
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    exact = here / f"{LIBRARY_STEM}{suffix}"
    if exact.is_file():
        return exact
    found = sorted(here.glob(f"{LIBRARY_STEM}*.so"))
    if found:
        return found[0]
    from perfscope.native import INSTALL_HINT

    raise CollectorError(f"the NCCL profiler plugin is not built (no {LIBRARY_STEM}*.so in {here}); {INSTALL_HINT}")


def _loaded_library() -> ctypes.CDLL | None:
    """The plugin as already loaded in this process (by NCCL), without loading it."""
    try:
        path = plugin_path()
    except CollectorError:
        return None
    try:
        # RTLD_NOLOAD: a handle only if the library is already mapped, i.e. NCCL loaded it.
        return ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None


def flush_in_process() -> bool:
    """Make the plugin loaded in this process write what it has queued; False if not loaded."""
    lib = _loaded_library()
    if lib is None:
        return False
    lib.perfscope_nccl_flush()
    return True


def set_level_in_process(level: int) -> int | None:
    """Set the level (0-3) of every communicator in this process; returns the previous one.

    Returns None when the plugin is not loaded here or no communicator exists yet.
    """
    lib = _loaded_library()
    if lib is None:
        return None
    old = int(lib.perfscope_nccl_set_level(int(level)))
    return None if old < 0 else old


__all__ = [
    "plugin_path", "configure_env", "ingest_dir", "summarize_dir", "default_dir",
    "flush_in_process", "set_level_in_process",
]
