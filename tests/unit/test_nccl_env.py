"""configure_env: wiring a job's environment for the NCCL plugin, never silently."""
from __future__ import annotations

from pathlib import Path

import pytest

from perfscope.collectors import nccl
from perfscope.collectors.nccl import configure_env, default_dir, plugin_path
from perfscope.errors import CollectorError, UsageError


@pytest.fixture
def no_conf(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No NCCL config file anywhere (HOME and NCCL_CONF_FILE point into tmp_path)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NCCL_CONF_FILE", str(tmp_path / "none.conf"))
    monkeypatch.setattr("perfscope.collectors.nccl.env._conf_file_setting", lambda: None)


def test_plugin_is_built_and_exports_the_three_abis() -> None:
    path = plugin_path()
    assert path.is_absolute() and path.is_file()
    import ctypes

    lib = ctypes.CDLL(str(path))
    for sym in ("ncclProfiler_v4", "ncclProfiler_v5", "ncclProfiler_v6", "perfscope_nccl_set_level"):
        assert hasattr(lib, sym)
    name = ctypes.c_char_p.in_dll(lib, "ncclProfiler_v5").value
    assert name == b"perfscope"


def test_missing_plugin_says_how_to_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(nccl, "__file__", str(tmp_path / "__init__.py"))
    with pytest.raises(CollectorError, match="pip install -e"):
        nccl.plugin_path()
    env: dict[str, str] = {}
    warnings = configure_env(env, tmp_path / "out")
    assert env == {} and "not recorded" in warnings[0]


def test_sets_plugin_dir_and_level(tmp_path: Path, no_conf: None) -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    assert configure_env(env, tmp_path / "run" / "nccl_plugin", level=3) == []
    assert env["NCCL_PROFILER_PLUGIN"] == str(plugin_path())
    assert env["PERFSCOPE_NCCL_DIR"] == str((tmp_path / "run" / "nccl_plugin").resolve())
    assert env["PERFSCOPE_NCCL_LEVEL"] == "3" and env["PATH"] == "/bin"
    env2: dict[str, str] = {"PERFSCOPE_NCCL_LEVEL": "2"}
    configure_env(env2, tmp_path)
    assert env2["PERFSCOPE_NCCL_LEVEL"] == "2"
    env3: dict[str, str] = {}
    configure_env(env3, tmp_path)
    assert env3["PERFSCOPE_NCCL_LEVEL"] == "1"
    assert default_dir(tmp_path / "r") == tmp_path / "r" / "nccl_plugin"


def test_keeps_the_users_plugin_and_warns(tmp_path: Path, no_conf: None) -> None:
    env = {"NCCL_PROFILER_PLUGIN": "inspector"}
    warnings = configure_env(env, tmp_path)
    assert env == {"NCCL_PROFILER_PLUGIN": "inspector"}
    assert len(warnings) == 1 and "'inspector'" in warnings[0] and "Unset NCCL_PROFILER_PLUGIN" in warnings[0]
    env = {"NCCL_PROFILER_PLUGIN": "none"}
    assert configure_env(env, tmp_path) and env["NCCL_PROFILER_PLUGIN"] == "none"
    # Ours already set (a nested perfscope record): fine, no warning.
    env = {"NCCL_PROFILER_PLUGIN": str(plugin_path())}
    assert configure_env(env, tmp_path) == []


def test_keeps_a_plugin_from_nccl_conf(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_DEBUG=WARN\nNCCL_PROFILER_PLUGIN=example\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(conf))
    env: dict[str, str] = {}
    warnings = configure_env(env, tmp_path)
    assert env == {} and str(conf) in warnings[0]


def test_level_zero_and_bad_levels(tmp_path: Path, no_conf: None) -> None:
    env: dict[str, str] = {}
    assert configure_env(env, tmp_path, level=0) == [] and env == {}
    with pytest.raises(UsageError, match="0-3"):
        configure_env({}, tmp_path, level=7)
    with pytest.raises(UsageError, match="not a level"):
        configure_env({"PERFSCOPE_NCCL_LEVEL": "max"}, tmp_path)


def test_in_process_controls_only_touch_a_loaded_plugin(tmp_path: Path) -> None:
    import subprocess
    import sys

    # A fresh interpreter: nothing loaded the plugin, so nothing happens.
    code = (
        "from perfscope.collectors.nccl import flush_in_process, set_level_in_process, plugin_path\n"
        "import ctypes\n"
        "assert flush_in_process() is False and set_level_in_process(0) is None\n"
        "ctypes.CDLL(str(plugin_path()))  # what NCCL's dlopen does\n"
        "assert flush_in_process() is True\n"
        "assert set_level_in_process(0) is None  # no communicator yet\n"
        "print('ok')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.stdout.strip() == "ok", p.stderr
