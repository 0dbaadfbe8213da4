"""Build of the native CUPTI buffer sink (``sink.c``).

``setup.py`` execs this file and calls :func:`extensions` (so building needs only a C
compiler: no CUDA or CUPTI headers, no Python headers are used).  The sink is a plain
shared library loaded with ctypes, declared as an extension module so that setuptools
builds and installs it next to the package as ``_sink.so`` (setup.py names it without a
Python version; an install without a compiler skips it).

From a source checkout without installing: ``python collectors/cupti/build.py`` compiles
it in place with ``cc`` (what the GPU tests do on a fresh machine).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "sink.c"
MODULE = "perfscope.collectors.cupti._sink"
CFLAGS = ["-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall"]


def extensions() -> list:
    """The setuptools Extension for the sink (empty list off Linux, where CUPTI is absent)."""
    if not sys.platform.startswith("linux"):
        return []
    from setuptools import Extension

    root = HERE.parent.parent
    return [Extension(
        MODULE,
        sources=[str(SOURCE.relative_to(root))],
        extra_compile_args=CFLAGS,
        libraries=["dl", "pthread"],
        # Not a Python module: nothing to export but the ps_* functions.
        py_limited_api=False,
    )]


def build_in_place(cc: str | None = None) -> Path:
    """Compile ``sink.c`` next to itself and return the library's path."""
    out = HERE / "_sink.so"  # the name setup.py gives it
    cmd = [cc or os.environ.get("CC", "cc"), *CFLAGS, "-shared", "-fPIC", "-o", str(out), str(SOURCE), "-ldl", "-lpthread"]
    subprocess.run(cmd, check=True)
    return out


if __name__ == "__main__":
    build_in_place()  # a checkout without `pip install -e .`: the library lands beside sink.c
