"""``perfscope info RUN [--json]``: a run's metadata and row counts."""
from __future__ import annotations

import json

import click

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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def info(run: str, as_json: bool) -> None:
    """Show RUN's metadata, ranks and row counts per table."""
    doc = run_info(run)
    if as_json:
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    from perfscope.cli.options import stdout_style
    from perfscope.reports.text import render_info_text

    color, width = stdout_style(80)
    click.echo(render_info_text(doc, width=width, color=color), nl=False)
