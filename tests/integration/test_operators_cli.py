"""The operator view through the CLI, on a shared PyTorch 2.x trace: the imported run holds
the trace's operators, ``perfscope info`` counts them, and the analysis and reports name the
operators with the most host time."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perfscope.cli.main import main
from perfscope.store import open_run

TRACE = "ns_resolution_trace_rank-0.json.gz"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """stdout of ``perfscope ARGV``, which must exit 0."""
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def test_shared_trace_operators_through_the_cli(shared_kineto: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    trace = shared_kineto / TRACE
    ops_in_trace = sum(1 for e in json.load(gzip.open(trace))["traceEvents"] if e.get("cat") == "cpu_op")
    run = tmp_path / "run"
    cli(capsys, "import", "kineto", str(trace), "-o", str(run))
    table = open_run(run).table("operators")
    assert len(table) == ops_in_trace == 23_910
    assert table["parent"].notna().sum() > 0 and (table["depth"] > 0).sum() == table["parent"].notna().sum()
    assert f"operators {ops_in_trace:,}" in " ".join(cli(capsys, "info", str(run)).replace("│", " ").split())

    doc = json.loads(cli(capsys, "analyze", str(run), "--format", "json"))
    overall = doc["operators"]["overall"]
    assert overall[0]["name"] == "aten::convolution_backward" and overall[0]["kind"] == "cpu_op"
    assert [r["self_ns"] for r in overall] == sorted((r["self_ns"] for r in overall), reverse=True)
    launch = doc["operators"]["launch"]
    assert launch and launch[0]["name"] == "aten::convolution_backward" and launch[0]["launches"] > 0
    assert doc["operators"]["call_sites"] == []  # recorded without with_stack

    md = cli(capsys, "report", str(run), "--format", "md", "-o", "-")
    assert "## Top host operators" in md and "aten::convolution\\_backward" in md
    # The one-call path (import and analyse); on a copy, as it keeps the run beside the trace.
    copy = tmp_path / TRACE
    copy.write_bytes(trace.read_bytes())
    text = cli(capsys, "analyze", str(copy))
    assert "Top host operators by self time in the steps" in text and "aten::convolution_backward" in text
