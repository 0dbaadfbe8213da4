"""``perfscope compare BASE NEW``: fail a CI job when NEW is slower than BASE beyond noise.

Exit codes: 0 no regression (also an improvement, and "too few steps" with a warning),
1 regression beyond ``--max-regression``, 2 usage or input error (raised as
:class:`~perfscope.errors.PerfscopeError` and mapped in :mod:`perfscope.cli.main`),
including a run with no steps at all unless ``--allow-empty``: a gate that finds nothing to
measure (a wrong ``--step-pattern``, a recording that broke) must not pass silently.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import click

from perfscope.cli.options import analysis_options, progress_reporter, stdout_style
from perfscope.errors import InputError, UsageError

if TYPE_CHECKING:
    from perfscope.analyzers import AnalysisConfig
    from perfscope.analyzers.compare import Comparison

FORMAT_CHOICES = ("text", "md", "junit", "html", "json")
# Wide enough for the metric table when the text goes into a pipe or a CI log.
PIPE_WIDTH = 110


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


def run_compare(
    base: str,
    new: str,
    config: AnalysisConfig | None = None,
    *,
    metric: str = "step_time",
    max_regression: float = 0.05,
    per_rank: bool = False,
    min_steps: int = 5,
    seed: int = 0,
    allow_empty: bool = False,
) -> Comparison:
    """Analyse both runs with the same ``config`` (:func:`perfscope.analyze`) and compare
    them (see :func:`perfscope.analyzers.compare.compare_runs`).

    Raises:
        InputError: a run has no steps and ``allow_empty`` is false (with it, such a run
            is "too few steps" like one with fewer than ``min_steps``: a pass with a warning).
    """
    import perfscope
    from perfscope.analyzers.compare import compare_runs, normalize_metric

    metric = normalize_metric(metric)  # a bad --metric fails before minutes of analysis
    analyses = []
    for path in (base, new):
        with progress_reporter(f"analysing {path}") as progress:
            analyses.append(perfscope.analyze(path, config, progress=progress))
    empty = [path for path, x in zip((base, new), analyses) if len(x.steps) == 0]
    if empty and not allow_empty:
        raise InputError(f"no steps in {' and '.join(empty)}: there is nothing to compare; check --step-pattern "
                         "and --ranks (perfscope analyze RUN shows what was found), or pass --allow-empty to pass anyway")
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
              help="Refuse to judge (pass with a warning) when either run has fewer steps, but some.")
@click.option("--allow-empty", is_flag=True,
              help="A run with no steps at all passes with a warning (default: exit 2).")
@analysis_options
@click.option("--format", "fmts", type=click.Choice(FORMAT_CHOICES), multiple=True,
              help="text (default), md (CI job summary), junit (XML), html (self-contained) or json. "
                   "Repeat with one -o each to write several reports from one analysis.")
@click.option("-o", "--output", "outputs", type=click.Path(dir_okay=False, allow_dash=True), multiple=True,
              help="Write the report here instead of stdout (- is stdout); one per --format.")
@click.option("--force", is_flag=True, help="Replace output files that exist.")
@click.option("--seed", default=0, show_default=True, type=int, hidden=True, help="Bootstrap seed.")
@click.pass_context
def compare(ctx: click.Context, base: str, new: str, metric: str, max_regression: str, per_rank: bool, min_steps: int,
            allow_empty: bool, config: AnalysisConfig, fmts: tuple[str, ...], outputs: tuple[str, ...], force: bool, seed: int) -> None:
    """Compare run NEW against run BASE; exit 1 if NEW regressed beyond noise.

    The verdict uses the per-step distributions: the change of the median step time with a
    bootstrap interval.  NEW fails only when it is significantly slower AND the slowdown
    exceeds --max-regression.  --step-pattern and --ranks apply to both runs.  Exit codes:
    0 pass, 1 regression, 2 usage or input error, or a run with no steps (--allow-empty
    passes it with a warning).

    \b
    Examples:
      perfscope compare main.perfscope pr.perfscope
      perfscope compare main.perfscope pr.perfscope --format md >> "$GITHUB_STEP_SUMMARY"
      perfscope compare main.perfscope pr.perfscope --format junit -o perf.xml --format html -o perf.html
    """
    from perfscope.reports import render_comparison
    from perfscope.reports.output import write_atomic

    threshold = parse_share(max_regression)
    targets = plan_outputs(fmts, outputs, force=force)
    result = run_compare(base, new, config, metric=metric, max_regression=threshold, per_rank=per_rank,
                         min_steps=min_steps, seed=seed, allow_empty=allow_empty)
    for fmt, output in targets:
        if output is None:
            color, width = stdout_style(PIPE_WIDTH)
            click.echo(render_comparison(result, fmt, **({"color": color, "width": width} if fmt == "text" else {})), nl=False)
        else:
            write_atomic(output, render_comparison(result, fmt))
    if not result.passed:
        ctx.exit(1)


def plan_outputs(fmts: tuple[str, ...], outputs: tuple[str, ...], *, force: bool) -> list[tuple[str, str | None]]:
    """Pair each ``--format`` with its ``-o`` (None = stdout), checked before any analysis.

    Raises:
        UsageError: the counts do not match, or stdout is asked for twice.
        RunExistsError: an output file exists and ``force`` is false.
    """
    from perfscope.reports.output import check_output

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
        check_output(o, force=force)
    return targets
