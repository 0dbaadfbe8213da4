"""``perfscope doctor [--json] [--strict]``: check this machine's GPU, CPU, NUMA and NCCL setup.

It only reads: nothing is changed, and no root is needed (what cannot be read is skipped).
"""
from __future__ import annotations

import json

import click

from perfscope.doctor import diagnose, failed

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


@click.command(name="doctor")
@click.option("--json", "as_json", is_flag=True, help="Print {facts, checks, summary} as one JSON document.")
@click.option("--strict", is_flag=True, help="Exit with status 1 when any check fails.")
def doctor(as_json: bool, strict: bool) -> int:
    """Check this machine's GPU, CPU, NUMA and NCCL settings (changes nothing)."""
    doc = diagnose()
    if as_json:
        click.echo(json.dumps(doc, indent=1, default=str))
    else:
        _print_table(doc)
    return 1 if strict and failed(doc) else 0


def _print_table(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    facts = doc["facts"]
    table = Table("check", "status", "message", "fix", title=f"perfscope doctor: {facts.get('host', '')}", show_lines=True)
    for c in doc["checks"]:
        table.add_row(
            c["id"],
            Text(c["status"], style=STATUS_STYLE.get(c["status"], "")),
            Text(c["message"]),
            Text(c["fix"], style="cyan"),
        )
    console.print(table)
    s = doc["summary"]
    console.print(f"{s['pass']} pass, {s['warn']} warn, {s['fail']} fail, {s['skip']} skip  (perfscope doctor --json for every fact)")
    for err in facts.get("errors") or []:
        console.print(Text(f"could not read: {err}", style="dim"))
