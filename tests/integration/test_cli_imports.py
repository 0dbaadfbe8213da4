"""Each command imports only what it uses (issue #17: fresh-process speed).

Asserted on the modules a fresh interpreter holds after the command, not on time: pandas
alone costs ~0.2 s of start-up, the trace importer ~0.1 s, Dask ~0.5 s.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDED = DATA / "h200" / "straggler.perfscope"

# Run the CLI in a fresh interpreter, then print the names of the modules it imported.
CHILD = """
import json, sys
from perfscope.cli.main import main
code = main(sys.argv[1:])
print("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

# What every reading or analysing command must leave alone.
NEVER = ("torch", "dash", "plotly", "dask", "distributed", "perfscope.store.writer", "perfscope.store.kineto.importer")


def modules_after(*argv: str) -> set[str]:
    """The modules imported by ``perfscope ARGV...`` in a fresh process (exit code 0 asserted)."""
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, check=True).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["code"] == 0, out
    return set(doc["modules"])


def loaded(modules: set[str], *names: str) -> list[str]:
    """Which of ``names`` (or a submodule of one) are in ``modules``."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


def test_help_imports_click_and_nothing_heavy() -> None:
    modules = modules_after("--help")
    assert loaded(modules, "numpy", "pyarrow", "pandas", "rich", "msgspec", "perfscope.store", "perfscope.analyzers",
                  "perfscope.reports", *NEVER) == []


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_info_of_a_recorded_run_reads_metadata_only(fmt: str) -> None:
    modules = modules_after("info", str(RECORDED), "--format", fmt)
    assert loaded(modules, "pandas", "perfscope.analyzers.analysis", "perfscope.store.kineto", *NEVER) == []


def test_info_of_an_imported_run_loads_the_provenance_not_the_importer(tmp_path: Path) -> None:
    from perfscope.store.kineto import import_kineto

    run = tmp_path / "ddp.perfscope"
    import_kineto([DATA / "kineto" / "ddp_rank0.json.gz"], run)
    modules = modules_after("info", str(run))
    assert "perfscope.store.kineto.formats" in modules  # it says where the trace came from
    assert loaded(modules, "pandas", "perfscope.analyzers.analysis", *NEVER) == []


def test_analyze_of_a_run_as_json_loads_no_importer_renderer_or_cluster() -> None:
    modules = modules_after("analyze", str(RECORDED), "--format", "json")
    assert "perfscope.analyzers.analysis" in modules  # the check can fail: it did analyse
    assert loaded(modules, "rich", "perfscope.store.kineto", "perfscope.reports.text", *NEVER) == []


def test_analyze_of_a_trace_imported_before_reuses_its_run_without_the_importer(tmp_path: Path) -> None:
    import shutil

    trace = tmp_path / "ddp_rank0.json.gz"
    shutil.copy(DATA / "kineto" / "ddp_rank0.json.gz", trace)
    run = tmp_path / "ddp.perfscope"
    first = modules_after("analyze", str(trace), "--run-out", str(run), "--format", "json")
    assert "perfscope.store.kineto.importer" in first  # the first analysis imports the trace
    again = modules_after("analyze", str(trace), "--run-out", str(run), "--format", "json")
    assert "perfscope.analyzers.analysis" in again
    assert loaded(again, "perfscope.store.kineto", *NEVER) == []


def test_analyze_refuses_an_existing_output_before_importing_the_analysis(tmp_path: Path) -> None:
    """A usage error comes before the heavy imports: the analysis options are built without
    NumPy or pandas (``LaunchThresholds`` lives in the config module)."""
    taken = tmp_path / "analysis.json"
    taken.write_text("{}")
    proc = subprocess.run([sys.executable, "-c", CHILD, "analyze", str(RECORDED), "--format", "json", "-o", str(taken)],
                          capture_output=True, text=True, check=False)
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["code"] == 2 and "already exists" in proc.stderr
    assert loaded(set(doc["modules"]), "numpy", "pandas", "pyarrow", *NEVER) == []
    assert taken.read_text() == "{}"
