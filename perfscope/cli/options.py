"""What the commands share: ``--step-pattern``/``--ranks``, ``-o FILE`` and ``--format``,
``--max-inflate``, progress on stderr, terminal facts, and the warnings of an import.
Nothing here imports the store or the analyzers at module level: every command imports
this module, and ``perfscope analyze RUN`` must not pay for the trace importer.

``analyze``, ``report``, ``compare`` and ``dashboard`` take :func:`analysis_options`, which
hands the command one :class:`~perfscope.analyzers.AnalysisConfig` as ``config``; they all
analyse through :func:`perfscope.analyze`.

The CLI conventions (README "CLI conventions"): ``-o`` is always the file a command writes
its output to, ``-`` (or no ``-o``) meaning stdout, checked before any work and replaced
only with ``--force`` (:func:`output_target`, :func:`emit`; files go through
:mod:`perfscope.reports.output`); ``--format`` picks the output format in every command
(:func:`format_option`, with ``--json`` kept as a hidden alias where it existed).
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from perfscope.errors import UsageError

if TYPE_CHECKING:
    from perfscope.analyzers import AnalysisConfig

F = TypeVar("F", bound=Callable[..., Any])


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


def analysis_config(step_pattern: str | None = None, ranks: str | None = None) -> AnalysisConfig:
    """The analysis options of ``--step-pattern`` and ``--ranks`` (parsed by :func:`parse_ranks`)."""
    from perfscope.analyzers import AnalysisConfig

    return AnalysisConfig(step_pattern=step_pattern, ranks=parse_ranks(ranks))


def analysis_options(command: F) -> F:
    """Add ``--step-pattern`` and ``--ranks`` to a click command, which receives them as one
    ``config`` (an :class:`~perfscope.analyzers.AnalysisConfig`) keyword argument."""

    @click.option("--step-pattern", default=None, metavar="REGEX", help="Regex over NVTX/annotation names that marks steps.")
    @click.option("--ranks", default=None, metavar="LIST", help="Ranks to analyse, e.g. 0,2,4-7 (default: all).")
    @functools.wraps(command)
    def wrapper(*args: Any, step_pattern: str | None, ranks: str | None, **kwargs: Any) -> Any:
        return command(*args, config=analysis_config(step_pattern, ranks), **kwargs)

    return wrapper  # type: ignore[return-value]


class Reporter:
    """Progress shown as a spinner and one line of text on stderr.

    Call it with a message (what :func:`perfscope.analyze` reports), or use :meth:`fraction`
    where work is counted (what :func:`perfscope.store.kineto.import_kineto` reports).
    """

    def __init__(self, status: Any, label: str) -> None:
        self._status, self._label = status, label

    def __call__(self, message: str) -> None:
        self._status.update(f"{self._label}: {message}")

    def fraction(self, message: str, done: int, total: int) -> None:
        """Show ``message`` with ``done`` of ``total`` as a percentage."""
        self(f"{message} ({100 * done / total:.0f}%)" if total > 0 else message)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class ByteSize(click.ParamType):
    """A size in bytes: ``1048576``, ``512M``, ``8G``, ``8GiB`` (binary units); 0 for none."""

    name = "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in _UNITS else ""
        try:
            number = float(text[:len(text) - len(unit)])
        except ValueError:
            number = -1.0
        if not 0 <= number < 1 << 60:
            self.fail(f"{value!r} is not a size (write e.g. 512M, 8G or 0 for no limit)", param, ctx)
        return int(number * _UNITS[unit])


#: ``--max-inflate`` of ``import kineto`` and ``analyze TRACE``.
max_inflate_option = click.option(
    "--max-inflate", type=ByteSize(), default=None, metavar="SIZE",
    help="Refuse a gzip trace that inflates to more than SIZE (e.g. 512M, 16G; 0: no limit) [default: 8G].")


@contextlib.contextmanager
def progress_reporter(label: str = "analysing", *, enabled: bool = True) -> Iterator[Reporter | None]:
    """Yield a :class:`Reporter` while the block runs when stderr is a terminal (and
    ``enabled``), else None: progress never goes into a pipe or a CI log."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console

    with Console(stderr=True).status(label) as status:
        yield Reporter(status, label)


def stdout_style(pipe_width: int) -> tuple[bool, int]:
    """(colour, width) for a text report on stdout: a terminal's width and colour (unless
    ``NO_COLOR`` is set), else no colour and ``pipe_width`` columns (a pipe has no width,
    and a narrow default would truncate tables)."""
    if not sys.stdout.isatty():
        return False, pipe_width
    return "NO_COLOR" not in os.environ, max(80, shutil.get_terminal_size((pipe_width, 24)).columns)


def format_option(choices: tuple[str, ...], default: str, help: str, *, json_alias: bool = False) -> Callable[[F], F]:
    """``--format`` (the command receives it as ``fmt``); with ``json_alias``, also a
    hidden ``--json`` flag that means ``--format json`` (the older spelling)."""

    def decorate(command: F) -> F:
        @click.option("--format", "fmt", type=click.Choice(choices), default=None, help=f"{help} Default: {default}.")
        @functools.wraps(command)
        def wrapper(*args: Any, fmt: str | None, **kwargs: Any) -> Any:
            if json_alias and kwargs.pop("as_json"):
                if fmt not in (None, "json"):
                    raise UsageError(f"--json means --format json; it contradicts --format {fmt}")
                fmt = "json"
            return command(*args, fmt=fmt or default, **kwargs)

        if json_alias:
            wrapper = click.option("--json", "as_json", is_flag=True, hidden=True, help="Same as --format json.")(wrapper)
        return wrapper  # type: ignore[return-value]

    return decorate


def output_option(what: str = "the output", force_help: str = "Replace FILE if it exists.") -> Callable[[F], F]:
    """``-o/--output FILE`` (``-`` is stdout) and ``--force``, received as ``output`` and
    ``force``."""

    def decorate(command: F) -> F:
        command = click.option("--force", is_flag=True, help=force_help)(command)
        return click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default=None,
                            metavar="FILE", help=f"Write {what} to FILE (default and -: stdout).")(command)

    return decorate


def output_target(output: str | None, *, force: bool) -> Path | None:
    """Where ``-o`` sends the output: None for stdout (no ``-o``, or ``-``), else the file,
    checked now, before the work that makes it.

    Raises:
        RunExistsError: the file exists and ``force`` is false.
    """
    from perfscope.reports.output import check_output

    return None if output in (None, "-") else check_output(output, force=force)


def text_style(target: Path | None, pipe_width: int) -> tuple[bool, int]:
    """(colour, width) of a text report going to ``target``: :func:`stdout_style` for
    stdout, no colour and ``pipe_width`` columns for a file."""
    return stdout_style(pipe_width) if target is None else (False, pipe_width)


def emit(text: str, target: Path | None) -> None:
    """Print ``text`` on stdout (``target`` None) or write it to the file atomically."""
    from perfscope.reports.output import write_atomic

    if target is None:
        click.echo(text, nl=False)
    else:
        write_atomic(target, text)


@contextlib.contextmanager
def import_warnings_on_stderr() -> Iterator[None]:
    """Show what an import had to guess (:class:`perfscope.pipeline.TraceImportWarning`) as
    ``perfscope: warning: ...`` lines on stderr; other warnings go on as usual."""
    from perfscope.pipeline import TraceImportWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceImportWarning)
        yield
    for w in caught:
        if issubclass(w.category, TraceImportWarning):
            click.echo(f"perfscope: warning: {w.message}", err=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


__all__ = [
    "ByteSize",
    "Reporter",
    "analysis_config",
    "analysis_options",
    "emit",
    "format_option",
    "import_warnings_on_stderr",
    "max_inflate_option",
    "output_option",
    "output_target",
    "parse_ranks",
    "progress_reporter",
    "stdout_style",
    "text_style",
]
