"""``perfscope info RUN [--format text|json] [-o FILE]``: a run's metadata and row counts."""
from __future__ import annotations

import json

import click

from perfscope.cli.options import (
    emit,
    format_option,
    output_option,
    output_target,
    text_style,
)
from perfscope.recorder.recover import recover_if_needed
from perfscope.store import open_run


def run_info(path: str) -> dict:
    """Return the info document: schema_version, status, run_id, source, command,
    world_size, ranks (list of rank dicts; an imported rank's ``trace_source`` and
    ``trace``, one line of it: see :mod:`perfscope.store.kineto.formats`), tables
    ({name: rows}) and integrity_warnings (what the store's checks found that does not
    stop reading)."""
    # (the importer's package: imported only when info runs)
    from perfscope.store.kineto.formats import describe

    run = open_run(path)
    meta = run.meta
    tables = run.row_counts()  # reads (and so checks) every footer before the warnings are taken
    return {
        "path": str(run.path),
        "schema_version": meta.get("schema_version"),
        "perfscope_version": meta.get("perfscope_version"),
        "run_id": meta.get("run_id"),
        "status": run.status,
        "source": meta.get("source"),
        "command": meta.get("command"),
        "world_size": meta.get("world_size"),
        "ranks": [
            {**{k: r.get(k) for k in ("rank", "host", "pid", "local_rank", "status", "gpu", "clock_offset_ns", "dropped_events",
                                      "warnings", "trace_source") if k in r},
             **({"trace": describe(r["trace_source"])} if r.get("trace_source") else {})}
            for r in meta.get("ranks", [])
        ] or [{"rank": r} for r in run.ranks],
        "collectors": meta.get("collectors", []),
        "tables": tables,
        "integrity_warnings": list(run.integrity_warnings),
    }


@click.command(name="info")
@click.argument("run", type=click.Path())
@format_option(("text", "json"), "text", "text (tables) or json (one document).", json_alias=True)
@output_option("the info")
def info(run: str, fmt: str, output: str | None, force: bool) -> None:
    """Show RUN's metadata, ranks and row counts per table."""
    target = output_target(output, force=force)
    recovered = recover_if_needed(run, by="perfscope info")
    if recovered:
        click.echo(f"perfscope: {recovered}", err=True)
    doc = run_info(run)
    if fmt == "json":
        emit(json.dumps(doc, indent=2, default=str) + "\n", target)
        return
    from perfscope.reports.text import NATURAL_WIDTH, render_info_text

    color, width = text_style(target, NATURAL_WIDTH)
    emit(render_info_text(doc, width=width, color=color), target)
