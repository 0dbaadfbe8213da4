"""``perfscope doctor [--json] [--strict]``: check this machine's GPU, CPU, NUMA and NCCL setup.

It only reads: nothing is changed, and no root is needed (what cannot be read is skipped).
"""
from __future__ import annotations

import json

import click

from perfscope.doctor import diagnose, failed


@click.command(name="doctor")
@click.option("--json", "as_json", is_flag=True, help="Print {facts, checks, summary} as one JSON document.")
@click.option("--strict", is_flag=True, help="Exit with status 1 when any check fails.")
def doctor(as_json: bool, strict: bool) -> int:
    """Check this machine's GPU, CPU, NUMA and NCCL settings (changes nothing)."""
    doc = diagnose()
    if as_json:
        click.echo(json.dumps(doc, indent=1, default=str))
    else:
        from perfscope.cli.options import stdout_style
        from perfscope.reports.text import render_doctor_text

        color, width = stdout_style(80)
        click.echo(render_doctor_text(doc, width=width, color=color), nl=False)
    return 1 if strict and failed(doc) else 0
