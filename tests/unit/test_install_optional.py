"""What an install without the optional parts says: missing native libraries (the doctor's
``perfscope.native`` check) and a missing Dash (``perfscope dashboard``)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from perfscope import native
from perfscope.cli.main import main
from perfscope.errors import CollectorError


def _gone() -> Path:
    raise CollectorError("not built")


def test_every_native_part_is_found_in_a_built_checkout() -> None:
    # GIVEN this checkout, installed with a compiler (pip install -e .)
    # THEN every part's locate function resolves (a moved loader breaks this, not the doctor)
    found = {p.name: native.library_path(p) for p in native.PARTS}
    assert all(path is not None and path.is_file() for path in found.values()), found
    assert all(path.suffix == ".so" for path in found.values() if path is not None)
    assert native.check()["status"] == "pass"


def test_a_missing_recording_library_is_a_warning_with_the_way_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the NCCL plugin's locate raising as it does when the library is not built
    monkeypatch.setattr("perfscope.collectors.nccl.plugin_path", _gone)
    result = native.check()
    assert result["id"] == native.CHECK_ID
    assert result["status"] == "warn"
    assert "NCCL profiler plugin not built: `perfscope record` captures no NCCL collectives" in result["message"]
    assert "CUPTI" not in result["message"]
    assert result["fix"] == native.INSTALL_HINT and "pip install" in result["fix"]


def test_a_missing_kineto_filter_only_slows_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    (kineto,) = [p for p in native.PARTS if not p.for_recording]
    module, _, function = kineto.locate.partition(":")
    monkeypatch.setattr(f"{module}.{function}", lambda: None)
    result = native.check()
    assert result["status"] == "pass"
    assert result["message"].startswith("Kineto filter not built: importing torch.profiler traces takes longer")


def test_the_doctor_reports_the_native_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfscope.doctor import diagnose

    monkeypatch.setattr("perfscope.collectors.cupti.native.library_path", lambda: None)
    doc = diagnose()
    assert doc["checks"][-1]["id"] == native.CHECK_ID
    assert "CUPTI buffer sink not built" in doc["checks"][-1]["message"]
    assert sum(doc["summary"].values()) == len(doc["checks"])


def test_dashboard_without_dash_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN `pip install perfscope` without the [dashboard] extra (None in sys.modules fails the import)
    monkeypatch.setitem(sys.modules, "dash", None)
    assert main(["dashboard", str(tmp_path)]) == 2
    assert "pip install 'perfscope[dashboard]'" in capsys.readouterr().err
