"""``perfscope dashboard``: serves the named runs on loopback, prints the URL, stops on Ctrl-C."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from dashboard_fixtures import make_run, real_analyze_run
from perfscope.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")


def test_a_path_that_is_not_a_run_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", str(tmp_path / "missing")]) == 2
    assert "no such run" in capsys.readouterr().err
    assert main(["dashboard", str(tmp_path)]) == 2
    assert "not a perfscope run" in capsys.readouterr().err


def test_no_run_named_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard"]) == 2
    assert "Missing argument" in capsys.readouterr().err


def test_a_taken_port_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import perfscope
    from dashboard_fixtures import fake_analyze
    from perfscope.cli import dashboard as cmd
    from perfscope.errors import UsageError

    run = make_run(tmp_path / "r")
    monkeypatch.setattr(perfscope, "analyze", fake_analyze)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UsageError, match="choose another --port"):
            cmd.make_server([str(run.path)], "127.0.0.1", port)


def test_step_pattern_and_ranks_reach_every_analysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN two runs and a taken port (so no server starts) WHEN the options are given
    import perfscope
    from dashboard_fixtures import fake_analyze

    runs = [make_run(tmp_path / "a"), make_run(tmp_path / "b")]
    configs = []

    def recording(run: object, config: object = None, **_: object) -> object:
        configs.append(config)
        return fake_analyze(run, config)  # type: ignore[arg-type]

    monkeypatch.setattr(perfscope, "analyze", recording)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = main(["dashboard", *(str(r.path) for r in runs), "--port", str(port),
                     "--step-pattern", "train_step", "--ranks", "1"])
    # THEN every run was analysed with them before the bind failed
    assert code == 2 and "choose another --port" in capsys.readouterr().err
    assert len(configs) == 2
    assert all(c.step_pattern == "train_step" and c.ranks == (1,) for c in configs)  # type: ignore[attr-defined]


def test_bad_ranks_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "r")
    assert main(["dashboard", str(run.path), "--ranks", "two"]) == 2
    assert "--ranks" in capsys.readouterr().err


@pytest.mark.skipif(real_analyze_run() is None, reason="needs perfscope.analyzers.analyze_run")
def test_serves_on_loopback_until_interrupted(tmp_path: Path) -> None:
    # GIVEN a run WHEN `perfscope dashboard RUN --port 0` runs
    run = make_run(tmp_path / "exp.perfscope")
    proc = subprocess.Popen([sys.executable, "-m", "perfscope", "dashboard", str(run.path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        # THEN it prints a loopback URL and serves the page and its layout there
        assert line.startswith("perfscope dashboard: http://127.0.0.1:"), line
        url = line.split()[2]
        with urllib.request.urlopen(url, timeout=20) as r:
            assert r.status == 200 and b"perfscope" in r.read()
            assert r.headers["X-Frame-Options"] == "DENY"
        with urllib.request.urlopen(url + "_dash-layout", timeout=20) as r:
            layout = json.loads(r.read())
        assert "4 steps" in json.dumps(layout)
        # AND Ctrl-C stops it cleanly
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert "analysed exp.perfscope" in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
