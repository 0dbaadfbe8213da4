"""``perfscope compare BASE NEW``: fail a CI job when NEW is slower than BASE beyond noise.

Exit codes: 0 no regression (also an improvement, and "too few steps" with a warning),
1 regression beyond ``--max-regression``, 2 usage or input error (raised as
:class:`~perfscope.errors.PerfscopeError` and mapped in :mod:`perfscope.cli.main`).
"""
from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfscope.errors import RunExistsError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from perfscope.analyzers.compare import Comparison
    from perfscope.analyzers.result import Analysis
    from perfscope.store import Run

FORMAT_CHOICES = ("text", "md", "junit", "html", "json")


def parse_share(text: str) -> float:
    """Parse a threshold given as ``5%``, ``5 %``, ``0.05`` or ``.05`` into a share (0.05).

    A bare number above 1 is refused rather than guessed (``5`` could mean 5 % or 500 %).

    Raises:
        UsageError: not a number, negative, or a bare number above 1.
    """
    s = text.strip()
    try:
        if s.endswith("%"):
            value = float(s[:-1].strip()) / 100.0
        else:
            value = float(s)
            if value > 1:
                raise UsageError(f"--max-regression {text!r} is ambiguous; write {s}% or {value / 100:g}")
    except ValueError:
        raise UsageError(f"--max-regression takes a share such as 5% or 0.05, got {text!r}") from None
    if not value >= 0 or value != value:
        raise UsageError(f"--max-regression must not be negative, got {text!r}")
    return value


def load_analysis(path: str, progress: Callable[[str], None] | None = None) -> Analysis:
    """Open the run at ``path`` and analyse it; ``progress`` gets a message per stage.

    Raises:
        InputError / NotARunError: ``path`` is missing or not a run (from the store).
    """
    from perfscope.store import open_run

    run = open_run(path)
    analyze_run = find_analyze_run()
    if progress is not None and "progress" in inspect.signature(analyze_run).parameters:
        return analyze_run(run, progress=progress)  # type: ignore[call-arg]
    return analyze_run(run)


@contextlib.contextmanager
def _progress(label: str) -> Iterator[Callable[[str], None] | None]:
    """A spinner on stderr while ``label`` is analysed, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(f"analysing {label}") as status:
        yield lambda msg: status.update(f"analysing {label}: {msg}")


def find_analyze_run() -> Callable[[Run], Analysis]:
    """Return ``perfscope.analyzers.analyze_run``.

    Raises:
        PerfscopeError: this build has no analyzer (a broken or partial install).
    """
    try:
        from perfscope.analyzers import analyze_run  # type: ignore[attr-defined]
    except ImportError:
        try:
            from perfscope.analyzers.analysis import analyze_run
        except ImportError as e:
            from perfscope.errors import PerfscopeError

            raise PerfscopeError(f"this perfscope build cannot analyse runs ({e}); reinstall perfscope") from None
    return analyze_run  # type: ignore[no-any-return]


def run_compare(
    base: str,
    new: str,
    *,
    metric: str = "step_time",
    max_regression: float = 0.05,
    per_rank: bool = False,
    min_steps: int = 5,
    seed: int = 0,
) -> Comparison:
    """Analyse both runs and compare them (see :func:`perfscope.analyzers.compare.compare_runs`)."""
    from perfscope.analyzers.compare import compare_runs, normalize_metric

    metric = normalize_metric(metric)  # a bad --metric fails before minutes of analysis
    analyses = []
    for path in (base, new):
        with _progress(path) as progress:
            analyses.append(load_analysis(path, progress) if progress is not None else load_analysis(path))
    a, b = analyses
    return compare_runs(a, b, metric=metric, max_regression=max_regression, per_rank=per_rank, min_steps=min_steps,
                        seed=seed, base_label=base, new_label=new)


@click.command(name="compare")
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@click.option("--metric", default="step_time", show_default=True, metavar="step_time|BUCKET",
              help="The metric that decides pass/fail: step_time or a bucket (compute, network, sync, pcie, data_loading, host).")
@click.option("--max-regression", "max_regression", default="5%", show_default=True, metavar="SHARE",
              help="Allowed slowdown as a share of the base median step time: 5% or 0.05.")
@click.option("--per-rank", is_flag=True, help="Judge every rank separately (any rank's regression fails).")
@click.option("--min-steps", default=5, show_default=True, type=click.IntRange(min=1),
              help="Refuse to judge (pass with a warning) when either run has fewer steps.")
@click.option("--format", "fmts", type=click.Choice(FORMAT_CHOICES), multiple=True,
              help="text (default), md (CI job summary), junit (XML), html (self-contained) or json. "
                   "Repeat with one -o each to write several reports from one analysis.")
@click.option("-o", "--output", "outputs", type=click.Path(dir_okay=False, allow_dash=True), multiple=True,
              help="Write the report here instead of stdout (- is stdout); one per --format.")
@click.option("--force", is_flag=True, help="Replace output files that exist.")
@click.option("--seed", default=0, show_default=True, type=int, hidden=True, help="Bootstrap seed.")
@click.pass_context
def compare(ctx: click.Context, base: str, new: str, metric: str, max_regression: str, per_rank: bool, min_steps: int,
            fmts: tuple[str, ...], outputs: tuple[str, ...], force: bool, seed: int) -> None:
    """Compare run NEW against run BASE; exit 1 if NEW regressed beyond noise.

    The verdict uses the per-step distributions: the change of the median step time with a
    bootstrap interval.  NEW fails only when it is significantly slower AND the slowdown
    exceeds --max-regression.  Exit codes: 0 pass, 1 regression, 2 usage or input error.

    \b
    Examples:
      perfscope compare main.perfscope pr.perfscope
      perfscope compare main.perfscope pr.perfscope --format md >> "$GITHUB_STEP_SUMMARY"
      perfscope compare main.perfscope pr.perfscope --format junit -o perf.xml --format html -o perf.html
    """
    threshold = parse_share(max_regression)
    targets = plan_outputs(fmts, outputs, force=force)
    result = run_compare(base, new, metric=metric, max_regression=threshold, per_rank=per_rank, min_steps=min_steps, seed=seed)
    for fmt, output in targets:
        text = _render(result, fmt, to_terminal=output is None)
        if output is None:
            click.echo(text, nl=False)
        else:
            _write(Path(output), text)
    if not result.passed:
        ctx.exit(1)


def plan_outputs(fmts: tuple[str, ...], outputs: tuple[str, ...], *, force: bool) -> list[tuple[str, str | None]]:
    """Pair each ``--format`` with its ``-o`` (None = stdout), checked before any analysis.

    Raises:
        UsageError: the counts do not match, or stdout is asked for twice.
        RunExistsError: an output file exists and ``force`` is false.
    """
    fmts = fmts or ("text",)
    if not outputs:
        if len(fmts) > 1:
            raise UsageError("several --format need one -o each (use -o - for stdout)")
        return [(fmts[0], None)]
    if len(outputs) != len(fmts):
        raise UsageError(f"got {len(fmts)} --format and {len(outputs)} -o; give one -o per --format (-o - for stdout)")
    targets = [(f, None if o == "-" else o) for f, o in zip(fmts, outputs)]
    if sum(o is None for _, o in targets) > 1:
        raise UsageError("only one report can go to stdout (-o -)")
    files = [o for _, o in targets if o is not None]
    if len(set(files)) != len(files):
        raise UsageError("two reports would be written to the same -o file")
    for o in files:
        if Path(o).exists() and not force:
            raise RunExistsError(f"{o} exists; pass --force to replace it or choose another -o")
    return targets


def _render(result: Comparison, fmt: str, *, to_terminal: bool) -> str:
    from perfscope.reports.compare_render import render, render_text

    if fmt == "text" and to_terminal:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        width = shutil.get_terminal_size((110, 24)).columns if color else 110
        return render_text(result, color=color, width=max(80, width))
    return render(result, fmt)


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file (a crash never leaves half a report)."""
    if not path.parent.exists():
        raise UsageError(f"folder {path.parent} does not exist; create it or choose another -o")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
