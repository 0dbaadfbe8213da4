"""``perfscope analyze RUN``: the step-time breakdown and the top findings.

``--format text`` (default) prints rich tables; ``--format json`` prints one JSON document
(:func:`perfscope.analyzers.analysis_to_json`).  Progress goes to stderr, only on a terminal.
Given a Kineto trace file instead of a run, it imports the trace into a run (``-o``, else
beside the trace) and analyses it in one go (:func:`perfscope.pipeline.import_and_analyze`).
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from perfscope.errors import InputError, UsageError


def parse_ranks(text: str | None) -> tuple[int, ...] | None:
    """Parse ``"0,2,4-7"`` into a sorted tuple of ranks (None for None/empty).

    Raises:
        UsageError: the text is not a comma-separated list of ranks and ranges.
    """
    if not text:
        return None
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise UsageError(f"--ranks {text!r}: use a comma-separated list of ranks and ranges, e.g. 0,2,4-7") from None
    return tuple(sorted(out))


@contextlib.contextmanager
def progress_reporter(label: str = "analysing") -> Iterator[Callable[[str], None] | None]:
    """Yield a progress callback that shows a spinner on stderr when it is a terminal, else None."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(label) as status:
        yield lambda msg: status.update(f"{label}: {msg}")


def run_analysis(path: str, step_pattern: str | None = None, ranks: str | None = None) -> Any:
    """Open ``path`` and analyse it (with progress on a terminal); returns the Analysis."""
    from perfscope.analyzers import AnalysisConfig, analyze_run
    from perfscope.store import open_run

    cfg = AnalysisConfig(step_pattern=step_pattern, ranks=parse_ranks(ranks))
    run = open_run(path)
    with progress_reporter() as progress:
        return analyze_run(run, cfg, progress=progress)


def is_trace_file(path: str) -> bool:
    """True when ``path`` is a file (a run is a directory): a Kineto trace to import."""
    return os.path.isfile(path)


def default_run_dir(trace: str) -> Path:
    """The run directory a trace is imported into without ``-o``: beside the trace, named
    after it (``t.json.gz`` -> ``t.perfscope``)."""
    p = Path(trace)
    name = p.name
    for suffix in (".gz", ".json"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return p.with_name(name + ".perfscope")


def run_trace_analysis(trace: str, run_out: str | None, force: bool, step_pattern: str | None = None,
                        ranks: str | None = None) -> tuple[Any, Any]:
    """Import Kineto ``trace`` into ``run_out`` (default :func:`default_run_dir`) and analyse
    it (with progress on a terminal); returns (ImportResult, Analysis).

    Raises:
        UsageError: no ``run_out`` and the trace's folder is not writable.
    """
    from perfscope.analyzers import AnalysisConfig
    from perfscope.pipeline import import_and_analyze

    cfg = AnalysisConfig(step_pattern=step_pattern, ranks=parse_ranks(ranks))
    out = Path(run_out) if run_out else default_run_dir(trace)
    if not run_out and not os.access(out.parent, os.W_OK):
        raise UsageError(f"cannot write the run beside the trace ({out.parent} is not writable); pass -o/--run-out DIR")
    with progress_reporter("importing and analysing") as progress:
        return import_and_analyze(trace, out, cfg, force=force, progress=progress)


MAX_STEP_ROWS = 40


def print_text(a: Any, console: Any = None) -> None:
    """Print the terminal report of an analysis with rich."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from perfscope.analyzers import BUCKET_COLUMNS, BUCKETS, step_summary

    # On a terminal rich uses its width; into a pipe or file, 80 columns would truncate the
    # bucket columns, so use a wide page instead.
    con = console or (Console() if sys.stdout.isatty() else Console(width=160))
    meta = a.meta or {}
    con.print(Text(f"run {meta.get('run_id', '?')}  source={meta.get('source', '?')}  world_size={meta.get('world_size', '?')}  "
                   f"status={meta.get('status', '?')}", style="bold"))
    summary = step_summary(a.steps)
    if len(a.steps) == 0:
        con.print("no steps to break down")
        for w in a.warnings:
            con.print(Text(f"warning: {w}", style="yellow"))
        return
    t = Table(title="Median step per rank (ms, % of step)", title_justify="left")
    for h in ("rank", "steps", "wall", *BUCKETS):
        t.add_column(h, justify="right")
    for _, s in summary.iterrows():
        w = s["wall_ns"] or 1
        t.add_row(str(int(s["rank"])), str(int(s["steps"])), f"{s['wall_ns'] / 1e6:,.2f}",
                  *[f"{s[c] / 1e6:,.2f} ({100 * s[c] / w:.0f}%)" for c in BUCKET_COLUMNS])
    con.print(t)

    steps = a.steps
    t = Table(title="Steps (ms)", title_justify="left")
    for h in ("rank", "step", "wall", *BUCKETS, "hidden net", "hidden pcie"):
        t.add_column(h, justify="right")
    for _, s in steps.head(MAX_STEP_ROWS).iterrows():
        t.add_row(str(int(s["rank"])), str(int(s["step"])), f"{s['wall_ns'] / 1e6:,.2f}",
                  *[f"{s[c] / 1e6:,.2f}" for c in BUCKET_COLUMNS], f"{s['hidden_network_ns'] / 1e6:,.2f}", f"{s['hidden_pcie_ns'] / 1e6:,.2f}")
    con.print(t)
    if len(steps) > MAX_STEP_ROWS:
        con.print(f"({len(steps) - MAX_STEP_ROWS} more steps: use --format json)")

    if len(a.stragglers):
        t = Table(title="Stragglers", title_justify="left")
        for h in ("rank", "ops", "arrived last", "share", "mean lateness ms", "cost to others ms"):
            t.add_column(h, justify="right")
        for _, r in a.stragglers.iterrows():
            t.add_row(str(int(r["rank"])), str(int(r["ops"])), str(int(r["last_count"])), f"{100 * r['last_share']:.0f}%",
                      f"{r['mean_lateness_ns'] / 1e6:,.2f}", f"{r['cost_to_others_ns'] / 1e6:,.2f}")
        con.print(t)

    con.print(Text("Top findings", style="bold underline"))
    if not a.recommendations:
        con.print("no rule fired; nothing in this run stands out.")
    for i, r in enumerate(a.recommendations, 1):
        saving = f"  saves ~{r.saving_ns / 1e6:,.2f} ms/step ({100 * r.saving_share:.0f}%)" if r.saving_ns else ""
        con.print(Text(f"{i}. {r.title}", style="bold") + Text(f"  [{r.id}]", style="dim") + Text(saving, style="green"))
        con.print(Text("   " + r.message))
        if r.change:
            con.print(Text("   change: ", style="dim") + Text(r.change, style="cyan"))
    for w in a.warnings:
        con.print(Text(f"warning: {w}", style="yellow"))


@click.command(name="analyze")
@click.argument("run", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format.")
@click.option("--step-pattern", default=None, metavar="REGEX", help="Regex over NVTX/annotation names that marks steps.")
@click.option("--ranks", default=None, metavar="LIST", help="Ranks to analyse, e.g. 0,2,4-7 (default: all).")
@click.option("-o", "--run-out", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="RUN is a trace: import it into DIR (default: beside the trace, named after it, e.g. "
                   "t.json.gz -> t.perfscope).")
@click.option("--force", is_flag=True, help="RUN is a trace: replace the run at the output if there is one.")
def analyze(run: str, fmt: str, step_pattern: str | None, ranks: str | None, run_out: str | None, force: bool) -> None:
    """Break each step of RUN into compute/network/sync/pcie/data_loading/host and recommend changes.

    RUN is a run directory, or a PyTorch profiler (Kineto) trace file (.json or .json.gz):
    the trace is then imported into a run, as `perfscope import kineto` does, and analysed
    in one go; the run is kept for later commands (where is said on stderr). An existing
    run is not replaced without --force. Several trace files (one per rank) go through
    `perfscope import kineto FILES... -o DIR` first.
    """
    if not is_trace_file(run):
        if not os.path.exists(run) and run.lower().endswith((".json", ".json.gz")):
            raise InputError(f"no such trace file: {run}")
        if run_out is not None or force:
            raise UsageError(f"-o/--run-out and --force apply to a trace file, and {run} is not a file; "
                             "to import traces use `perfscope import kineto`")
        a = run_analysis(run, step_pattern, ranks)
    else:
        result, a = run_trace_analysis(run, run_out, force, step_pattern, ranks)
        for w in result.warnings:
            click.echo(f"perfscope: warning: {w}", err=True)
        click.echo(f"perfscope: imported {run} into {result.path} (next time: perfscope analyze {shlex.quote(str(result.path))})",
                   err=True)
    if fmt == "json":
        from perfscope.analyzers import analysis_to_json

        click.echo(json.dumps(analysis_to_json(a), indent=1, allow_nan=False))
        return
    print_text(a)
