"""`perfscope compare` command and renderers: exit codes, options, every output format.

The runs are real run directories (so "missing run" and "not a run" go through the store),
but their analyses are synthetic: ``perfscope.analyze`` is replaced by one that opens the run
and returns the Analysis registered for its path.  tests/integration/test_compare_e2e.py runs
the real analyzer.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pandas as pd
import pytest

import perfscope
from perfscope.analyzers.compare import compare_runs
from perfscope.analyzers.result import Analysis, Recommendation
from perfscope.cli import compare as compare_cli
from perfscope.cli.main import main
from perfscope.errors import UsageError
from perfscope.reports import render_comparison as render
from perfscope.reports.html_compare import render_comparison_html as render_html
from perfscope.reports.jsondoc import comparison_to_json as to_dict
from perfscope.reports.junit import render_junit
from perfscope.reports.markdown import render_comparison_markdown as render_markdown
from perfscope.store import create_run, update_run

from compare_fixtures import draw_steps, make_analysis

EVIL = 'void k<float, 2>|`x`</script><script>alert(1)</script>&"\x01'


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Run directories base/same/slow/fast/short, with synthetic analyses behind them."""
    rng = np.random.default_rng(7)
    base = draw_steps(rng, 40, sigma=0.05)
    kernels_b = pd.DataFrame({"rank": [0, 0], "name": ["gemm", EVIL], "kind": ["compute", "compute"],
                              "count": [40, 40], "total_ns": [40 * 50e6, 40 * 5e6]})
    kernels_n = kernels_b.assign(total_ns=[40 * 50e6, 40 * 12e6])
    rec = Recommendation(id="host.sync<evil>", bucket="host", title=EVIL, message=EVIL, saving_share=0.03)
    analyses = {
        "base": make_analysis(base, kernels=kernels_b),
        "same": make_analysis(base, kernels=kernels_b),
        "slow": make_analysis(draw_steps(rng, 40, sigma=0.05, slowdown=0.10), kernels=kernels_n, recommendations=[rec]),
        "fast": make_analysis(draw_steps(rng, 40, sigma=0.05, slowdown=-0.15)),
        "short": make_analysis(base[:3] * 1.5),
    }
    paths = {}
    for name in analyses:
        p = tmp_path / f"{name}.perfscope"
        create_run(p, command=["train.py"], source="test", world_size=1)
        update_run(p, status="complete")
        paths[name] = p
    (tmp_path / "plain").mkdir()
    paths["plain"] = tmp_path / "plain"
    paths["missing"] = tmp_path / "nope"
    by_path = {str(p): analyses[n] for n, p in paths.items() if n in analyses}
    real = perfscope.analyze

    def fake_analyze(path: str, config: object = None, **_: object) -> Analysis:
        from perfscope.store import open_run

        open_run(path)  # missing / not-a-run errors come from the real store
        return by_path[str(path)]

    monkeypatch.setattr(perfscope, "analyze", fake_analyze)
    assert real is not fake_analyze
    return paths


def cli(*args: object) -> int:
    return main(["compare", *map(str, args)])


def test_identical_runs_exit_0(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(runs["base"], runs["same"]) == 0
    out = capsys.readouterr().out
    assert "No regression" in out and "step_time" in out


def test_ten_percent_slower_exit_1(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(runs["base"], runs["slow"], "--max-regression", "5%") == 1
    assert "Regression" in capsys.readouterr().out


def test_threshold_spellings_agree(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(runs["base"], runs["slow"], "--max-regression", "0.05", "--format", "json") == 1
    a = json.loads(capsys.readouterr().out)
    assert cli(runs["base"], runs["slow"], "--max-regression", "5 %", "--format", "json") == 1
    b = json.loads(capsys.readouterr().out)
    assert a["max_regression"] == b["max_regression"] == 0.05 and a["rows"] == b["rows"]
    assert cli(runs["base"], runs["slow"], "--max-regression", "25%") == 0


def test_faster_exit_0_and_says_improvement(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(runs["base"], runs["fast"]) == 0
    assert "Improvement" in capsys.readouterr().out


def test_too_few_steps_exit_0_with_warning(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(runs["base"], runs["short"]) == 0
    out = capsys.readouterr().out
    assert "too few steps" in out and "new has 3" in out


@pytest.mark.parametrize("which", ["missing", "plain"])
def test_missing_or_not_a_run_exit_2(runs: dict[str, Path], which: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(runs["base"], runs[which]) == 2
    err = capsys.readouterr().err
    assert "perfscope: error:" in err and str(runs[which]) in err


@pytest.mark.parametrize("args", [["--max-regression", "abc"], ["--max-regression", "5"], ["--max-regression", "-1%"],
                                  ["--metric", "latency"], ["--format", "pdf"], ["--min-steps", "0"]])
def test_usage_errors_exit_2(runs: dict[str, Path], args: list[str]) -> None:
    assert cli(runs["base"], runs["same"], *args) == 2


def test_incompatible_per_rank_exit_2(runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    moved = make_analysis(draw_steps(np.random.default_rng(1), 40))
    moved = Analysis(steps=moved.steps.assign(rank=3), gpu_summary=moved.gpu_summary, kernels=moved.kernels,
                     collectives=moved.collectives, stragglers=moved.stragglers, recommendations=[])
    base = make_analysis(draw_steps(np.random.default_rng(2), 40))
    monkeypatch.setattr(perfscope, "analyze", lambda p, *_, **__: base if "base" in str(p) else moved)
    assert cli(runs["base"], runs["same"], "--per-rank") == 2
    assert "share no rank" in capsys.readouterr().err


def test_step_pattern_and_ranks_reach_both_analyses(runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake, configs = perfscope.analyze, []

    def recording(path: str, config: object = None, **kw: object) -> Analysis:
        configs.append(config)
        return fake(path, config, **kw)

    monkeypatch.setattr(perfscope, "analyze", recording)
    assert cli(runs["base"], runs["same"], "--step-pattern", "train_step", "--ranks", "0,2-3") == 0
    assert len(configs) == 2
    assert all(c.step_pattern == "train_step" and c.ranks == (0, 2, 3) for c in configs)  # type: ignore[attr-defined]


@pytest.mark.parametrize("args", [["--ranks", "x"], ["--ranks", "3-1"]])
def test_bad_ranks_exit_2_before_any_analysis(runs: dict[str, Path], args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perfscope, "analyze", lambda *a, **k: pytest.fail("analysed despite a bad --ranks"))
    assert cli(runs["base"], runs["same"], *args) == 2


def test_output_file_and_force(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "perf.xml"
    assert cli(runs["base"], runs["slow"], "--format", "junit", "-o", out) == 1
    assert ET.parse(out).getroot().get("failures") == "1"
    assert cli(runs["base"], runs["same"], "--format", "junit", "-o", out) == 2  # exists, no --force
    assert cli(runs["base"], runs["same"], "--format", "junit", "-o", out, "--force") == 0
    assert ET.parse(out).getroot().get("failures") == "0"


def test_parse_share() -> None:
    assert compare_cli.parse_share("5%") == pytest.approx(0.05)
    assert compare_cli.parse_share("0.05") == pytest.approx(0.05)
    assert compare_cli.parse_share("12.5 %") == pytest.approx(0.125)
    for bad in ("5", "x%", "-0.1", "nan"):
        with pytest.raises(UsageError):
            compare_cli.parse_share(bad)


# -- renderers ----------------------------------------------------------------------------


@pytest.fixture
def regression() -> object:
    rng = np.random.default_rng(3)
    kb = pd.DataFrame({"rank": [0], "name": ["gemm"], "kind": ["compute"], "count": [30], "total_ns": [30 * 40e6]})
    kn = pd.DataFrame({"rank": [0, 0], "name": ["gemm", EVIL], "kind": ["compute"] * 2, "count": [30, 30],
                       "total_ns": [30 * 40e6, 30 * 6e6]})
    coll = pd.DataFrame({"rank": [0] * 30, "func": ["AllReduce"] * 30, "bytes": [1 << 26] * 30, "dur_ns": [4e6] * 30})
    rec = Recommendation(id="x.y", bucket="host", title=EVIL, message=EVIL, change=EVIL)
    return compare_runs(make_analysis(draw_steps(rng, 30, sigma=0.05), ranks=2, kernels=kb, collectives=coll),
                        make_analysis(draw_steps(rng, 30, sigma=0.05, slowdown=0.12), ranks=2, kernels=kn,
                                      collectives=coll.assign(dur_ns=7e6), recommendations=[rec]),
                        per_rank=True, base_label="main <b>", new_label="pr & co")


def test_junit_parses_one_case_per_row_and_a_failure_per_gating_regression(regression: object) -> None:
    xml = render_junit(regression)  # type: ignore[arg-type]
    root = ET.fromstring(xml.encode())
    cases = root.findall(".//testcase")
    assert len(cases) == len(regression.rows)  # type: ignore[attr-defined]
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["step_time [rank 0]", "step_time [rank 1]"]
    assert root.get("failures") == "2"
    assert "\x01" not in xml


def test_markdown_escapes_names_and_fits_a_summary(regression: object) -> None:
    md = render_markdown(regression)  # type: ignore[arg-type]
    assert "<script>" not in md and "</script>" not in md and "\x01" not in md
    assert "&lt;float, 2&gt;\\|" in md  # escaped, and the table cell is not split
    evil_row = next(line for line in md.splitlines() if line.startswith("| void k"))
    assert len(re.findall(r"(?<!\\)\|", evil_row)) == 6  # 5 cells: the name's own | is escaped
    assert md.startswith("## ❌") and len(md.encode()) < 64 * 1024


def test_html_is_self_contained_and_escapes_names(regression: object) -> None:
    page = render_html(regression)  # type: ignore[arg-type]
    assert page.count("<script>alert(1)") == 0
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert "main &lt;b&gt;" in page and "pr &amp; co" in page
    assert "src=\"http" not in page and "cdn.plot.ly" not in page.split("</script>", 1)[1]
    assert "Plotly.newPlot" in page


def test_json_is_strict_and_complete(regression: object) -> None:
    doc = json.loads(render(regression, "json"))  # type: ignore[arg-type]
    assert doc["verdict"] == "regression" and doc["passed"] is False
    assert {r["metric"] for r in doc["rows"]} >= {"step_time", "compute", "host"}
    assert doc["new_recommendations"][0]["id"] == "x.y"
    assert doc["kernels"][0]["name"] == EVIL
    assert doc == to_dict(regression)  # type: ignore[arg-type]


def test_text_renders_without_markup_injection(regression: object) -> None:
    text = render(regression, "text")  # type: ignore[arg-type]
    assert "Regression" in text and "\x1b[" not in text
    assert "pr & co" in text


def test_several_formats_from_one_analysis(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xml, page = tmp_path / "perf.xml", tmp_path / "perf.html"
    code = cli(runs["base"], runs["slow"], "--format", "junit", "-o", xml, "--format", "md", "-o", "-", "--format", "html", "-o", page)
    assert code == 1
    assert ET.parse(xml).getroot().get("failures") == "1"
    assert capsys.readouterr().out.startswith("## ❌")
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("args", [["--format", "md", "--format", "json"], ["--format", "md", "-o", "a", "-o", "b"],
                                  ["--format", "md", "-o", "-", "--format", "json", "-o", "-"]])
def test_mismatched_formats_and_outputs_exit_2(runs: dict[str, Path], args: list[str], monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli(runs["base"], runs["same"], *args) == 2
