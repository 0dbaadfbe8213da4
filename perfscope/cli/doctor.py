"""``perfscope doctor [--format text|json] [-o FILE] [--strict]``: check this machine's GPU, CPU, NUMA and NCCL setup.

It only reads: nothing is changed, and no root is needed (what cannot be read is skipped).
"""
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
from perfscope.doctor import diagnose, failed


@click.command(name="doctor")
@format_option(("text", "json"), "text", "text (one row per check) or json ({facts, checks, summary}).", json_alias=True)
@output_option("the checks")
@click.option("--strict", is_flag=True, help="Exit with status 1 when any check fails.")
def doctor(fmt: str, output: str | None, force: bool, strict: bool) -> int:
    """Check this machine's GPU, CPU, NUMA and NCCL settings (changes nothing)."""
    target = output_target(output, force=force)
    doc = diagnose()
    if fmt == "json":
        emit(json.dumps(doc, indent=1, default=str) + "\n", target)
    else:
        from perfscope.reports.text import NATURAL_WIDTH, render_doctor_text

        # In a pipe or a file, as wide as the checks need: never cut a message or a fix.
        color, width = text_style(target, NATURAL_WIDTH)
        emit(render_doctor_text(doc, width=width, color=color), target)
    return 1 if strict and failed(doc) else 0
