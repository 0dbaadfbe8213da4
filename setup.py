"""Build script: maps the top-level folders into the ``perfscope`` namespace.

``collectors/``, ``analyzers/`` and ``dashboards/`` live at the top of the repository (the
design card asks for it) but install as ``perfscope.collectors``, ``perfscope.analyzers``
and ``perfscope.dashboards``, so nothing generic lands in site-packages.  Native parts
(the NCCL profiler plugin) are declared in ``native_extensions()``.
"""
from __future__ import annotations

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
MAPPED = {
    "perfscope": "perfscope",
    "perfscope.collectors": "collectors",
    "perfscope.analyzers": "analyzers",
    "perfscope.dashboards": "dashboards",
}


def mapped_packages() -> tuple[list[str], dict[str, str]]:
    """Return (package names, package_dir) for every package under the mapped folders."""
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for name, folder in MAPPED.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_packages(where=folder):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages, package_dir


def native_extensions() -> list:
    """Native libraries built at install time (see collectors/{nccl,cupti}/build.py and
    perfscope/store/kineto/build.py)."""
    exts: list = []
    builds = (ROOT / "collectors" / "nccl" / "build.py", ROOT / "collectors" / "cupti" / "build.py",
              ROOT / "perfscope" / "store" / "kineto" / "build.py")
    for build in builds:
        if not build.exists():
            continue
        namespace: dict = {"__file__": str(build), "__name__": "perfscope_build"}
        exec(compile(build.read_text(), str(build), "exec"), namespace)
        exts += namespace["extensions"]()
    return exts


packages, package_dir = mapped_packages()
setup(packages=packages, package_dir=package_dir, ext_modules=native_extensions())
