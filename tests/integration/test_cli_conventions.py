"""The CLI conventions of README "CLI conventions" (issue #19), each through the real CLI.

``-o`` is always the output file (``-`` is stdout), ``--format`` in every command (``--json``
a hidden alias), traces (a file, several, a folder) are analysed directly and their run is
reused while they are unchanged, the text report puts the answer first, and ``compare``
refuses runs without steps.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import perfscope
from perfscope.cli.main import main
from perfscope.errors import RunExistsError
from perfscope.reports.text import top_kernels_overall
from perfscope.store import create_run, open_run, update_run

DATA = Path(__file__).resolve().parents[1] / "data"
RUN = DATA / "h200" / "straggler.perfscope"
DDP = [DATA / "kineto" / "ddp_rank0.json.gz", DATA / "kineto" / "ddp_rank1.json.gz"]
NO_RANK_TRACE = DATA / "kineto" / "single_gpu_absolute.json"


def cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """Run ``perfscope ARGV``; return (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def empty_run(tmp_path: Path) -> Path:
    """A complete run that recorded nothing: no steps."""
    run = tmp_path / "empty.perfscope"
    create_run(run, source="record")
    update_run(run, status="complete")
    return run


@pytest.fixture
def tb_logdir(tmp_path: Path) -> Path:
    """A folder as torch.profiler.tensorboard_trace_handler and TensorBoard lay it out:
    two ranks' ``*.pt.trace.json.gz`` under ``plugins/profile/<run>/``, plus other files."""
    run = tmp_path / "tb_logs" / "plugins" / "profile" / "2026_12_03"
    run.mkdir(parents=True)
    for i, trace in enumerate(DDP):
        shutil.copy(trace, run / f"node1_{100 + i}.1733200000000.pt.trace.json.gz")
    (tmp_path / "tb_logs" / "events.out.tfevents.1733200000.node1").write_bytes(b"\0")
    return tmp_path / "tb_logs"


# -- -o is the output file ----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_analyze_o_writes_the_analysis_and_dash_is_stdout(tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, printed, err = cli(capsys, "analyze", RUN, "--format", fmt)
    assert code == 0, err
    out = tmp_path / f"analysis.{fmt}"
    code, nothing, err = cli(capsys, "analyze", RUN, "--format", fmt, "-o", out)
    assert code == 0 and nothing == "", err
    assert out.read_text() == printed
    code, dashed, _ = cli(capsys, "analyze", RUN, "--format", fmt, "-o", "-")
    assert code == 0 and dashed == printed
    code, _, err = cli(capsys, "analyze", RUN, "--format", fmt, "-o", out)  # exists: not replaced
    assert code == 2 and "--force" in err
    assert cli(capsys, "analyze", RUN, "--format", fmt, "-o", out, "--force")[0] == 0


def test_analyze_o_of_a_trace_is_the_output_and_run_out_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json.gz"
    shutil.copy(DDP[0], trace)
    code, _, err = cli(capsys, "analyze", trace, "-o", tmp_path / "a.txt")
    assert code == 0, err
    assert "Top findings" in (tmp_path / "a.txt").read_text()
    assert open_run(tmp_path / "t.perfscope").status == "complete"  # the run went beside the trace
    code, _, err = cli(capsys, "analyze", trace, "--run-out", tmp_path / "elsewhere", "-o", "-")
    assert code == 0, err
    assert open_run(tmp_path / "elsewhere").status == "complete"
    assert "-o, --output FILE" in cli(capsys, "analyze", "--help")[1]
    assert "--run-out DIR" in cli(capsys, "analyze", "--help")[1]


def test_report_o_dash_prints_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "report", RUN, "--format", "md", "-o", "-")
    assert code == 0, err
    assert out.startswith("# perfscope report") and "## Top findings" in out
    assert not (tmp_path / "-").exists() and err == ""
    code, out, _ = cli(capsys, "report", RUN, "--format", "json", "-o", "-")
    assert code == 0 and json.loads(out)["run"]["run_id"] == open_run(RUN).meta["run_id"]


def test_export_chrome_o_dash_writes_the_trace_to_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "export", "chrome", RUN, "-o", "-")
    assert code == 0, err
    events = json.loads(out)["traceEvents"]
    assert len(events) > 100 and "to stdout" in err
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("command", [["info", RUN], ["doctor"]])
def test_info_and_doctor_o(tmp_path: Path, command: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    code, printed, err = cli(capsys, *command, "--format", "json", "-o", out)
    assert code == 0 and printed == "", err
    assert json.loads(out.read_text())
    assert cli(capsys, *command, "--format", "json", "-o", out)[0] == 2  # exists, no --force


# -- --format everywhere ------------------------------------------------------------------


@pytest.mark.parametrize("command", [["info", RUN], ["doctor"]])
def test_format_json_and_the_hidden_json_alias(command: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, formatted, _ = cli(capsys, *command, "--format", "json")
    code2, aliased, _ = cli(capsys, *command, "--json")
    assert code == code2 == 0
    a, b = json.loads(formatted), json.loads(aliased)
    if command == ["doctor"]:  # the facts carry the time they were read
        a["facts"].pop("collected_ns", None), b["facts"].pop("collected_ns", None)
    assert a == b
    code, text, _ = cli(capsys, *command)
    assert code == 0 and not text.lstrip().startswith("{")
    code, _, err = cli(capsys, *command, "--json", "--format", "text")
    assert code == 2 and "--json means --format json" in err
    help_text = cli(capsys, *command, "--help")[1]
    assert "--format [text|json]" in help_text and "--json" not in help_text


def test_report_format_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    help_text = " ".join(cli(capsys, "report", "--help")[1].split())
    assert "--format [md|html|json]" in help_text and "self-contained" in help_text


# -- traces analysed directly, their run reused while they are unchanged ------------------


def test_analyze_a_tensorboard_logdir(tb_logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "analyze", tb_logdir, "--format", "json")
    assert code == 0, err
    run = tb_logdir.with_name("tb_logs.perfscope")
    assert f"imported 2 traces in {tb_logdir / 'plugins/profile/2026_12_03'} into {run}" in err
    assert open_run(run).ranks == [0, 1]
    assert {r["rank"] for r in json.loads(out)["steps"]} == {0, 1}
    code, again, err = cli(capsys, "analyze", tb_logdir, "--format", "json")
    assert code == 0 and f"reusing {run}" in err
    assert json.loads(again) == json.loads(out)


def test_a_folder_of_several_runs_or_of_nothing_is_refused(tb_logdir: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    other = tb_logdir / "plugins" / "profile" / "2026_12_04"
    other.mkdir()
    shutil.copy(DDP[0], other / "node1_100.1733300000000.pt.trace.json")
    code, _, err = cli(capsys, "analyze", tb_logdir)
    assert code == 2 and "holds the traces of 2 runs" in err and "2026_12_04" in err
    code, _, err = cli(capsys, "analyze", other)  # one of them: fine
    assert code == 0, err
    (tmp_path / "empty").mkdir()
    code, _, err = cli(capsys, "analyze", tmp_path / "empty")
    assert code == 2 and "holds no PyTorch profiler traces" in err
    assert not (tmp_path / "empty.perfscope").exists()


def test_analyze_several_trace_files_as_ranks_of_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [tmp_path / p.name for p in DDP]
    for src, dst in zip(DDP, files):
        shutil.copy(src, dst)
    code, out, err = cli(capsys, "analyze", *files, "--format", "json")
    assert code == 0, err
    run = open_run(tmp_path / "ddp.perfscope")  # named after the files, without the rank
    assert run.ranks == [0, 1]
    code, again, err = cli(capsys, "analyze", *reversed(files), "--format", "json")  # order does not matter
    assert code == 0 and "reusing" in err and json.loads(again) == json.loads(out)
    code, _, err = cli(capsys, "analyze", RUN, RUN)
    assert code == 2 and "to compare two runs use `perfscope compare`" in err


def test_the_run_records_its_sources_and_is_reused_until_they_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    shutil.copy(NO_RANK_TRACE, trace)
    code, first, err = cli(capsys, "analyze", trace)
    assert code == 0 and "imported" in err
    run_dir = tmp_path / "t.perfscope"
    st = trace.stat()
    assert open_run(run_dir).meta["sources"] == [{"path": str(trace.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}]
    run_json = (run_dir / "run.json").read_bytes()
    code, second, err = cli(capsys, "analyze", trace)
    assert code == 0 and "reusing" in err and "warning" not in err  # nothing imported, nothing guessed
    assert second == first and (run_dir / "run.json").read_bytes() == run_json
    code, _, err = cli(capsys, "report", trace, "--format", "md", "-o", "-")  # every command reuses it
    assert code == 0 and (run_dir / "run.json").read_bytes() == run_json
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: maybe changed
    code, _, err = cli(capsys, "analyze", trace)
    assert code == 2 and "other or changed files" in err and "--force" in err
    assert (run_dir / "run.json").read_bytes() == run_json
    code, _, err = cli(capsys, "analyze", trace, "--force")
    assert code == 0 and "imported" in err
    assert open_run(run_dir).meta["sources"][0]["mtime_ns"] == st.st_mtime_ns + 10**9


def test_a_run_that_was_not_imported_from_the_trace_is_not_reused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    shutil.copy(NO_RANK_TRACE, trace)
    create_run(tmp_path / "t.perfscope", source="record")
    update_run(tmp_path / "t.perfscope", status="complete")
    code, _, err = cli(capsys, "analyze", trace)
    assert code == 2 and "does not list the files it was imported from" in err
    with pytest.raises(RunExistsError):
        perfscope.analyze(trace)


# -- text output: the answer first --------------------------------------------------------


def test_text_puts_findings_then_warnings_then_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "analyze", RUN)
    assert code == 0
    a = perfscope.analyze(RUN)
    assert a.recommendations and a.warnings == []  # the order below is of real sections
    order = [out.index(s) for s in ("Top findings", "Median step per rank", "Stragglers", "Top kernels by GPU time")]
    assert order == sorted(order)
    assert "Steps (ms)" not in out and "--steps" in out
    code, with_steps, _ = cli(capsys, "analyze", RUN, "--steps")
    steps_at = with_steps.index("Steps (ms)")
    assert steps_at > with_steps.index("Top kernels")
    # Every step is listed (28 steps on 4 ranks), the table's rows are the analysis's.
    rows = [line for line in with_steps[steps_at:].splitlines() if line.startswith("│")]
    assert len(rows) == len(a.steps) == 28


def test_warnings_come_before_the_summary(empty_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "analyze", empty_run)
    assert code == 0, err
    assert "warning:" in out and "no steps to break down" in out
    assert out.index("warning:") < out.index("no steps to break down")


def test_top_kernels_sum_over_ranks() -> None:
    kernels = pd.DataFrame({
        "rank": [0, 0, 1, 1], "name": ["gemm", "nccl", "gemm", "nccl"],
        "kind": ["compute", "communication"] * 2, "count": [10, 2, 10, 4],
        "total_ns": [8_000, 2_000, 6_000, 4_000], "share": [0.8, 0.2, 0.6, 0.4],
    })
    top = top_kernels_overall(kernels, 5)
    assert top["name"].tolist() == ["gemm", "nccl"]
    assert top["count"].tolist() == [20, 6] and top["total_ns"].tolist() == [14_000, 6_000]
    assert top["mean_ns"].tolist() == [700, 1_000]
    assert top["share"].tolist() == pytest.approx([0.7, 0.3])
    assert top_kernels_overall(kernels, 1)["name"].tolist() == ["gemm"]


def test_top_kernels_table_of_a_real_run(capsys: pytest.CaptureFixture[str]) -> None:
    a = perfscope.analyze(RUN)
    top = top_kernels_overall(a.kernels, 10)
    assert len(top) == 10 and top["total_ns"].is_monotonic_decreasing
    assert top["total_ns"].iloc[0] == a.kernels.groupby("name")["total_ns"].sum().max()
    out = cli(capsys, "analyze", RUN)[1]
    table = out[out.index("Top kernels"):]
    assert f"{top['total_ns'].iloc[0] / 1e6:,.2f}" in table and "ncclDevKernel_AllReduce" in table


# -- compare: no steps is not a pass ------------------------------------------------------


def test_compare_of_runs_without_steps_fails_unless_allowed(empty_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "compare", RUN, empty_run)
    assert code == 2 and out == ""
    assert f"no steps in {empty_run}:" in err and "--allow-empty" in err
    code, out, err = cli(capsys, "compare", empty_run, empty_run, "--format", "json")
    assert code == 2 and f"no steps in {empty_run} and {empty_run}" in err
    code, out, err = cli(capsys, "compare", RUN, empty_run, "--allow-empty")
    assert code == 0, err
    assert "too few steps" in out.lower()
    # Some steps, fewer than --min-steps: still the warning and a pass, as before.
    code, out, _ = cli(capsys, "compare", RUN, RUN, "--min-steps", "100")
    assert code == 0 and "too few steps" in out.lower()


# -- messages -----------------------------------------------------------------------------


def test_the_import_warning_names_the_option_that_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "analyze", NO_RANK_TRACE, "--run-out", tmp_path / "r")
    assert code == 0
    assert "perfscope import kineto --rank N" in err and "pass --rank" not in err
    assert "--rank" in cli(capsys, "import", "kineto", "--help")[1]


def test_profile_into_an_existing_run_names_overwrite(tmp_path: Path) -> None:
    create_run(tmp_path / "taken", source="record")
    with pytest.raises(RunExistsError) as e:
        perfscope.profile(tmp_path / "taken", cupti=False, nccl=False, nvml=False).start()
    assert "overwrite=True" in str(e.value) and "--force" not in str(e.value)


def test_doctor_in_a_pipe_is_not_cut_at_80_columns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import perfscope.cli.doctor as doctor_cli

    message = "a long message " * 12 + "END"
    fix = "export NCCL_SOMETHING=1 && " * 4 + "FIXEND"
    doc = {"facts": {"host": "h", "errors": []},
           "checks": [{"id": "x.long", "status": "warn", "message": message.strip(), "fix": fix}],
           "summary": {"pass": 0, "warn": 1, "fail": 0, "skip": 0}}
    monkeypatch.setattr(doctor_cli, "diagnose", lambda: doc)
    code, out, _ = cli(capsys, "doctor")
    assert code == 0
    assert message.strip() in out and fix in out  # each on one line, whole
    assert max(map(len, out.splitlines())) > 200


def test_dashboard_logs_requests_only_when_verbose(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("dash")
    from perfscope.cli.dashboard import make_server, quiet_requests

    logger = logging.getLogger("werkzeug")
    level = logger.level
    server, _ = make_server([str(RUN)], "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/_dash-layout"
    try:
        caplog.set_level(logging.INFO)
        quiet_requests(True)
        urllib.request.urlopen(url, timeout=30).read()
        assert not [r for r in caplog.records if "_dash-layout" in r.getMessage()]
        quiet_requests(False)
        urllib.request.urlopen(url, timeout=30).read()
        assert [r for r in caplog.records if "_dash-layout" in r.getMessage()]
    finally:
        server.shutdown()
        server.server_close()
        logger.setLevel(level)
    assert "--verbose" in cli(capsys, "dashboard", "--help")[1]
