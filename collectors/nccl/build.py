"""Build description of the NCCL profiler plugin, executed by the repository's setup.py.

The plugin is a plain C shared library (no Python module inside: nothing imports it); it is
declared as a setuptools ``Extension`` only so that ``pip install .`` and ``pip install -e .``
compile it with the same toolchain as everything else (or skip it, with a note, where no
compiler works).  It lands in the installed package folder ``perfscope/collectors/nccl/`` as
``libperfscope_nccl.so`` (setup.py names it without a Python version), where
:func:`perfscope.collectors.nccl.plugin_path` finds it.

Flags that matter:
    * ``-fvisibility=hidden``: only ``ncclProfiler_v4/_v5/_v6`` and the ``perfscope_nccl_*``
      control functions are exported;
    * ``-Wl,-z,nodelete``: NCCL ``dlclose``s its profiler when the last communicator goes
      away, but our flusher thread and any stale event handle must stay valid until the
      process exits, so the library is never unmapped;
    * ``-pthread``.
"""
from __future__ import annotations

from pathlib import PurePosixPath

SOURCES = ["collectors/nccl/perfscope_nccl.c"]
HEADERS = ["collectors/nccl/nccl_profiler_abi.h", "collectors/nccl/perfscope_nccl_format.h"]
LIBRARY_NAME = "libperfscope_nccl"
COMPILE_ARGS = ["-std=gnu11", "-O2", "-fvisibility=hidden", "-pthread", "-Wall", "-Wextra", "-Wno-unused-parameter"]
LINK_ARGS = ["-pthread", "-Wl,-z,nodelete"]


def extensions() -> list:
    """Return the setuptools ``Extension`` objects to build (one: the NCCL profiler plugin)."""
    import sys

    from setuptools import Extension

    if not sys.platform.startswith("linux"):
        return []  # NCCL exists on Linux only
    return [
        Extension(
            f"perfscope.collectors.nccl.{LIBRARY_NAME}",
            sources=[str(PurePosixPath(s)) for s in SOURCES],
            depends=list(HEADERS),
            include_dirs=["collectors/nccl"],
            extra_compile_args=list(COMPILE_ARGS),
            extra_link_args=list(LINK_ARGS),
            py_limited_api=False,
        )
    ]
