"""Entry point of the ``perfscope`` command.

Subcommands live one per module and are imported only when used, so ``perfscope info``
never pays for importing dash or torch.  This is the one place that turns a
:class:`~perfscope.errors.PerfscopeError` into a one-line message and an exit code.
"""
from __future__ import annotations

import importlib
import sys

import click

from perfscope import __version__
from perfscope.errors import PerfscopeError

# name -> "module:attribute" of a click command or group.
COMMANDS: dict[str, str] = {
    "record": "perfscope.cli.record:record",
    "trigger": "perfscope.cli.trigger:trigger",
    "import": "perfscope.cli.import_cmd:import_group",
    "export": "perfscope.cli.export_cmd:export_group",
    "info": "perfscope.cli.info:info",
    "recover": "perfscope.cli.recover:recover",
    "analyze": "perfscope.cli.analyze:analyze",
    "report": "perfscope.cli.report:report",
    "compare": "perfscope.cli.compare:compare",
    "dashboard": "perfscope.cli.dashboard:dashboard",
    "doctor": "perfscope.cli.doctor:doctor",
}

HELP = {
    "record": "Record a training job: perfscope record -o RUN -- CMD ...",
    "trigger": "Open a recording window in a job recorded with --on-demand.",
    "import": "Import traces from other profilers (Kineto/PyTorch profiler JSON).",
    "export": "Export a run (Chrome/Perfetto trace JSON, TensorBoard).",
    "info": "Show a run's metadata and row counts.",
    "recover": "Decode what a killed job left undecoded in a run.",
    "analyze": "Break each step's time into buckets and recommend changes.",
    "report": "Write an analysis report (Markdown or self-contained HTML).",
    "compare": "Compare two runs for regressions (exit 1 on a regression).",
    "dashboard": "Serve the web dashboard for one or more runs.",
    "doctor": "Check this machine's GPU, CPU, NUMA and NCCL settings.",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            return _unavailable(cmd_name)
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help without importing every subcommand module.
        with formatter.section("Commands"):
            formatter.write_dl([(name, HELP.get(name, "")) for name in COMMANDS])


def _unavailable(name: str) -> click.Command:
    @click.command(name=name, help=HELP.get(name, ""))
    def cmd() -> None:
        raise PerfscopeError(f"`perfscope {name}` is not available in this build")

    return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="perfscope")
def cli() -> None:
    """perfscope: find out where GPU training time goes, and what to change."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the exit code."""
    try:
        rv = cli.main(args=argv, prog_name="perfscope", standalone_mode=False)
    except PerfscopeError as e:
        click.echo(f"perfscope: error: {e}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("perfscope: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except BrokenPipeError:
        return 0
    return rv if isinstance(rv, int) else 0


def run() -> None:
    """Console-script entry point: exit with :func:`main`'s code."""
    sys.exit(main())


if __name__ == "__main__":
    run()
