"""The sdist and the wheel install where no C compiler is, and the installed perfscope works.

GIVEN the sdist and the wheel that ``python -m build`` makes of this checkout (with a
compiler: the wheel holds every native library), WHEN each is installed into a fresh venv
whose PATH holds only that venv's ``bin`` and where ``CC=/bin/false``, THEN the install
succeeds (the sdist skips the native libraries), and ``perfscope analyze``, ``report`` and
``compare`` work and give the same analysis with and without the native libraries.

No network: the venvs see this environment's installed dependencies through a ``.pth``
file (so pandas and pyarrow are not reinstalled), pip runs with ``--no-index``, and the
builds use the installed setuptools (``--no-isolation``).  The sdist's venv also hides
``dash`` and ``isal`` (stub packages that fail to import), as ``pip install perfscope``
without extras would leave them out.
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "kineto" / "ddp_rank0.json.gz"
#: The native libraries a wheel built with a compiler holds (plain ``.so`` names).
NATIVE = {"perfscope/collectors/nccl/libperfscope_nccl.so", "perfscope/collectors/cupti/_sink.so",
          "perfscope/store/kineto/_libkineto.so"}
#: Optional dependencies hidden in the sdist's venv.
HIDDEN = ("dash", "isal")


def _setuptools_at_least(major: int) -> bool:
    from importlib.metadata import version

    return int(version("setuptools").split(".")[0]) >= major


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the sdist and, from it, the wheel; return ``{"sdist": path, "wheel": path}``."""
    pytest.importorskip("build", reason="the packaging test needs `build`: pip install -e '.[test]'")
    if not _setuptools_at_least(77):
        pytest.skip("the packaging test needs setuptools>=77: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                          check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = out.glob("perfscope-*.tar.gz")
    (wheel,) = out.glob("perfscope-*.whl")
    return {"sdist": sdist, "wheel": wheel}


def _venv(folder: Path, hide: tuple[str, ...] = ()) -> dict[str, str]:
    """Make a venv at ``folder`` that sees this environment's packages (except ``hide``) and
    return the environment to run in it: PATH is its ``bin`` alone, and no C compiler works."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    (purelib,) = folder.glob("lib/python3*/site-packages")
    # Appended after the venv's own site-packages: what gets installed there wins.
    (purelib / "_outer_site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    for name in hide:
        (purelib / name).mkdir()
        (purelib / name / "__init__.py").write_text(f"raise ImportError('{name} is hidden in this venv')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    env.update(PATH=str(folder / "bin"), CC="/bin/false", CXX="/bin/false", VIRTUAL_ENV=str(folder))
    return env


def _run(venv: Path, env: dict[str, str], *args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(venv / "bin" / args[0]), *args[1:]], check=False, env=env, cwd=cwd,
                          capture_output=True, text=True)
    if ok:
        assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def _install(dist: Path, folder: Path, hide: tuple[str, ...] = ()) -> dict[str, str]:
    """Install ``dist`` (no dependencies, no index) into a fresh venv at ``folder``; return its env."""
    env = _venv(folder, hide)
    _run(folder, env, "python", "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--ignore-installed",
         "--no-build-isolation", "--no-compile", str(dist), cwd=folder)
    where = _run(folder, env, "python", "-c", "import perfscope; print(perfscope.__file__)", cwd=folder).stdout
    assert Path(where.strip()).is_relative_to(folder), where
    return env


def _analysis(venv: Path, env: dict[str, str], cwd: Path) -> dict[str, object]:
    """Analyse a copy of the fixture in ``cwd``; return the JSON analysis without its random run id."""
    trace = cwd / FIXTURE.name
    shutil.copy(FIXTURE, trace)
    doc = json.loads(_run(venv, env, "perfscope", "analyze", str(trace), "--format", "json", cwd=cwd).stdout)
    doc["run"].pop("run_id")
    return doc


def test_wheel_is_one_per_platform_and_holds_the_native_libraries(dists: dict[str, Path]) -> None:
    name = dists["wheel"].name
    assert name.startswith("perfscope-") and "-py3-none-" in name and not name.endswith("-any.whl"), name
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = set(whl.namelist())
        wheel_meta = next(whl.read(n).decode() for n in names if n.endswith(".dist-info/WHEEL"))
        metadata = next(whl.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert NATIVE <= names, sorted(n for n in names if n.endswith(".so"))
    assert "Root-Is-Purelib: false" in wheel_meta
    assert "License-Expression: Apache-2.0" in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    required = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not [r for r in required if any(h in r for h in HIDDEN)], required


def test_sdist_and_wheel_install_and_work_without_a_compiler(dists: dict[str, Path], tmp_path: Path) -> None:
    sdist_venv, wheel_venv = tmp_path / "sdist-venv", tmp_path / "wheel-venv"
    sdist_env = _install(dists["sdist"], sdist_venv, hide=HIDDEN)
    wheel_env = _install(dists["wheel"], wheel_venv)
    assert not list(sdist_venv.rglob("*.so")), "the sdist built a native library with CC=/bin/false and no gcc on PATH"
    assert {p.name for p in wheel_venv.rglob("*.so")} == {Path(n).name for n in NATIVE}

    assert "Usage: perfscope" in _run(sdist_venv, sdist_env, "perfscope", "--help", cwd=tmp_path).stdout
    work = {venv: tmp_path / f"{venv.name}-work" for venv in (sdist_venv, wheel_venv)}
    for folder in work.values():
        folder.mkdir()
    plain = _analysis(sdist_venv, sdist_env, work[sdist_venv])
    native = _analysis(wheel_venv, wheel_env, work[wheel_venv])
    assert plain["steps"], "the analysis found no steps"
    assert plain == native

    run = work[sdist_venv] / "ddp_rank0.perfscope"
    for fmt in ("md", "html"):
        _run(sdist_venv, sdist_env, "perfscope", "report", str(run), "--format", fmt, "-o", str(tmp_path / f"r.{fmt}"),
             cwd=tmp_path)
        assert (tmp_path / f"r.{fmt}").stat().st_size > 1000
    assert _run(sdist_venv, sdist_env, "perfscope", "compare", str(run), str(run), cwd=tmp_path).returncode == 0

    doctor = json.loads(_run(sdist_venv, sdist_env, "perfscope", "doctor", "--json", cwd=tmp_path).stdout)
    (native_check,) = [c for c in doctor["checks"] if c["id"] == "perfscope.native"]
    assert native_check["status"] == "warn"
    for part in ("NCCL profiler plugin", "CUPTI buffer sink", "Kineto filter"):
        assert f"{part} not built" in native_check["message"]
    assert "pip install" in native_check["fix"]

    dash = _run(sdist_venv, sdist_env, "perfscope", "dashboard", str(run), cwd=tmp_path, ok=False)
    assert dash.returncode == 2 and "pip install 'perfscope[dashboard]'" in dash.stderr, dash.stderr
