"""Build of the Kineto pre-filter and column extractor (``prefilter.c``,
``columns.c``).

``setup.py`` execs this file and calls :func:`extensions`.  Both are one plain shared
library loaded with ctypes (no Python headers are used), named like an extension module
so that setuptools builds and installs it next to :mod:`perfscope.store.kineto.prefilter`
(:mod:`perfscope.store.kineto.native` loads the same file).  Without it the importer
decodes whole traces, as it did before the filter existed.

From a source checkout without installing: ``python perfscope/store/kineto/build.py``
compiles it in place with ``cc``.
"""
from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = (HERE / "prefilter.c", HERE / "columns.c")
HEADERS = (HERE / "json_bytes.h",)  # included by both sources
MODULE = "perfscope.store.kineto._libkineto"
CFLAGS = ["-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall"]


def extensions() -> list:
    """The setuptools Extension for the filter (empty where the compiler may not be GCC or
    Clang: the source uses their extensions, and the importer works without it)."""
    if os.name != "posix":
        return []
    from setuptools import Extension

    root = HERE.parent.parent.parent
    return [Extension(
        MODULE,
        sources=[str(source.relative_to(root)) for source in SOURCES],
        depends=[str(header.relative_to(root)) for header in HEADERS],
        extra_compile_args=[*CFLAGS, "-pthread"],
        extra_link_args=["-pthread"],
        # Not a Python module: nothing to export but kf_filter, kc_extract and kc_layout.
        py_limited_api=False,
        # Without it imports only take longer: a failed build must not fail the install.
        optional=True,
    )]


def build_in_place(cc: str | None = None, extra_flags: list[str] | None = None, out: Path | None = None) -> Path:
    """Compile the sources into a library next to them (or at ``out``) and return its path.

    ``extra_flags`` are added to the compiler's (e.g. ``-fsanitize=address,undefined``:
    the sanitizer tests build such a library elsewhere and load it through
    ``PERFSCOPE_KINETO_FILTER_LIB``).
    """
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    out = out or HERE / f"_libkineto{suffix}"
    cmd = [cc or os.environ.get("CC", "cc"), *CFLAGS, *(extra_flags or []), "-pthread", "-shared", "-fPIC",
           "-o", str(out), *map(str, SOURCES)]
    subprocess.run(cmd, check=True)
    return out


if __name__ == "__main__":
    build_in_place()  # a checkout without `pip install -e .`: the library lands beside the source
