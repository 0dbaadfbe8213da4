"""pyproject.toml's dependencies and extras against scripts/ci-constraints.txt, and the extras
that keep ``pip install perfscope`` small."""
from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "scripts" / "ci-constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def _requirements(*extras: str) -> list[Requirement]:
    lines = [*PROJECT["dependencies"], *(r for e in extras for r in PROJECT["optional-dependencies"][e])]
    return [r for r in map(Requirement, lines) if canonicalize_name(r.name) != "perfscope"]


def test_every_installed_requirement_is_pinned_by_ci_within_its_range() -> None:
    pins = _pins()
    for req in _requirements("dashboard", "test"):
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in scripts/ci-constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"ci pins {req.name}=={pins[name]}, outside {req}"


def test_the_core_install_leaves_out_the_server_and_the_optional_speedups() -> None:
    core = {canonicalize_name(r.name) for r in _requirements()}
    assert not core & {"dash", "isal", "cupti-python", "torch"}, core
    assert "plotly" in core  # the HTML report's figures
    assert "perfscope[dashboard]" in PROJECT["optional-dependencies"]["test"]


def test_gpu_extras_pin_one_cupti_python_per_cuda_major() -> None:
    cupti = {extra: next(r for r in _requirements(extra) if r.name == "cupti-python")
             for extra in ("gpu", "gpu-cu12")}
    assert str(cupti["gpu"].specifier) == "==13.0.1"
    assert str(cupti["gpu-cu12"].specifier).startswith("==12.")


def test_license_is_an_spdx_expression_with_its_file() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
