"""The GitHub Actions example (examples/ci/perf.yml): it parses, has the steps the README
describes, and every ``perfscope`` command it runs exists with the options it passes."""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest

from perfscope.cli.main import cli

WORKFLOW = Path(__file__).resolve().parents[2] / "examples" / "ci" / "perf.yml"
_SHELL_BREAKS = {">", ">>", "|", "||", "&&", ";", "2>", "then", "fi"}


def _steps() -> list[dict[str, Any]]:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the key `on` as True.
    assert set(doc.get("on", doc.get(True))) == {"push", "pull_request"}
    (job,) = doc["jobs"].values()
    return list(job["steps"])


def perfscope_commands(script: str) -> list[list[str]]:
    """The argument lists of the ``perfscope ...`` commands in a shell ``script`` (each up
    to a redirection, pipe or command separator)."""
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line.replace(";", " ; "), comments=True)
        for i, w in enumerate(words):
            if w == "perfscope" and (i == 0 or words[i - 1] in _SHELL_BREAKS | {"if", "!"}):
                args = []
                for a in words[i + 1:]:
                    if a in _SHELL_BREAKS:
                        break
                    args.append(a)
                found.append(args)
    return found


def test_workflow_records_uploads_downloads_and_compares() -> None:
    steps = _steps()
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert "actions/upload-artifact" in uses
    scripts = [s["run"] for s in steps if "run" in s]
    commands = [c for s in scripts for c in perfscope_commands(s)]
    assert [c[0] for c in commands] == ["record", "compare"]
    compare = next(s for s in steps if "perfscope compare" in s.get("run", ""))
    # The report goes to the job summary and the step's exit code is compare's (the
    # default bash shell runs with -e): a regression fails the job.
    assert re.search(r'--format md >> "\$GITHUB_STEP_SUMMARY"\s*$', compare["run"])
    assert "continue-on-error" not in compare
    # The new run is uploaded before the comparison can fail the job.
    upload = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload < steps.index(compare)
    assert steps[upload]["with"]["path"] == "new.perfscope"
    download = next(s for s in steps if "gh run download" in s.get("run", ""))
    assert steps[upload]["with"]["name"] in download["run"]


@pytest.mark.parametrize("script", [s["run"] for s in _steps() if "perfscope " in s.get("run", "")])
def test_every_perfscope_command_parses(script: str) -> None:
    for args in perfscope_commands(script):
        ctx = cli.make_context("perfscope", list(args), resilient_parsing=True)
        cmd = cli.get_command(ctx, args[0])
        assert cmd is not None, f"no perfscope command {args[0]!r}"
        # Full parsing: an unknown option or a bad choice raises click.UsageError.
        try:
            cmd.make_context(args[0], list(args[1:]), parent=ctx)
        except click.UsageError as e:
            pytest.fail(f"perfscope {shlex.join(args)}: {e.format_message()}")


def test_command_finder_sees_commands_and_stops_at_redirections() -> None:
    script = 'perfscope compare a b --format md >> "$X"\nif perfscope info r; then echo ok; fi\necho perfscope x'
    assert perfscope_commands(script) == [["compare", "a", "b", "--format", "md"], ["info", "r"]]
    ctx = cli.make_context("perfscope", ["compare"], resilient_parsing=True)
    compare = cli.get_command(ctx, "compare")
    assert compare is not None
    with pytest.raises(click.UsageError):
        compare.make_context("compare", ["a", "b", "--no-such-option"], parent=ctx)
