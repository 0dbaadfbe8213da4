"""Build script: maps the top-level folders into the ``perfscope`` namespace and builds the
optional native libraries.

``collectors/``, ``analyzers/`` and ``dashboards/`` live at the top of the repository (the
design card asks for it) but install as ``perfscope.collectors``, ``perfscope.analyzers``
and ``perfscope.dashboards``, so nothing generic lands in site-packages.

Native parts (the NCCL profiler plugin, the CUPTI buffer sink, the Kineto filter) are plain
C shared libraries loaded with ctypes: none uses the Python C API.  Each is described by a
build script next to its sources (a file named ``build.py`` or ``*_build.py`` that defines
``extensions()``), found by :func:`native_extensions` wherever it lives, so moving a part
needs no change here.  Every library is built if a C compiler works and skipped with a note
if not: perfscope imports, analyses, reports and compares without any of them, and
``perfscope doctor`` says which are missing and how to get them.  The libraries are named
``<name>.so`` (no Python version in the name) and the wheel is tagged ``py3-none-<platform>``:
one wheel per platform serves every Python 3 (``[tool.cibuildwheel]`` in pyproject.toml
builds the manylinux ones).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
MAPPED = {
    "perfscope": "perfscope",
    "perfscope.collectors": "collectors",
    "perfscope.analyzers": "analyzers",
    "perfscope.dashboards": "dashboards",
}
#: Build scripts are Python files with these names under the mapped folders.
BUILD_SCRIPT_PATTERNS = ("build.py", "*_build.py")


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


def build_scripts() -> list[Path]:
    """Return the native build scripts under the mapped folders, sorted by path."""
    found = {script for folder in MAPPED.values() for pattern in BUILD_SCRIPT_PATTERNS
             for script in (ROOT / folder).rglob(pattern)}
    return sorted(found)


def native_extensions() -> list[Extension]:
    """Return the ``Extension`` of every native library, from each build script's ``extensions()``."""
    exts: list[Extension] = []
    for script in build_scripts():
        namespace: dict = {"__file__": str(script), "__name__": "perfscope_build"}
        exec(compile(script.read_text(), str(script), "exec"), namespace)  # noqa: S102 - our own build scripts
        exts += namespace["extensions"]()
    return exts


class OptionalNativeBuild(build_ext):
    """``build_ext`` for ctypes libraries: plain ``.so`` names, and a library that cannot be
    built (no compiler, a compiler error) is skipped with a note instead of failing the install."""

    def get_ext_filename(self, fullname: str) -> str:
        # No Python ABI in the name: the same file serves every interpreter (py3-none wheel).
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extensions(self) -> None:
        self.skipped: set[str] = set()
        super().build_extensions()
        # What comes after (copies into the source tree for editable installs, the list of
        # outputs) must not look for the libraries that were skipped.
        self.extensions = [ext for ext in self.extensions if ext.name not in self.skipped]

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001 - any build failure means "skip this optional part"
            self.skipped.add(ext.name)
            why = f"{type(e).__name__}: {e}"
            print(f"perfscope: skipped the native library {ext.name} ({why[:200]}); perfscope works without it, "
                  "and `perfscope doctor` says what it adds and how to get it", file=sys.stderr)
            return
        if self.inplace or getattr(self, "editable_mode", False):
            self._remove_stale_copies(ext)

    def _remove_stale_copies(self, ext: Extension) -> None:
        """Delete copies of ``ext`` in the source tree under the older ``<name>.cpython-*.so``
        names: the loaders try interpreter-specific names first and would load the stale one."""
        package, _, stem = ext.name.rpartition(".")
        folder = Path(self.get_finalized_command("build_py").get_package_dir(package))
        for old in folder.glob(f"{stem}.*.so"):
            old.unlink()


class PlatformWheel(bdist_wheel):
    """A ``py3-none-<platform>`` wheel: platform-specific (it holds native libraries) but
    independent of the Python version and ABI (they are loaded with ctypes)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


packages, package_dir = mapped_packages()
setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=native_extensions(),
    cmdclass={"build_ext": OptionalNativeBuild, "bdist_wheel": PlatformWheel},
)
