"""Rewrite a run with one part file per table and rank (smaller, fewer files).

Used to turn runs recorded on the device machine into small test fixtures:

    python scripts/compact_run.py SRC_RUN DST_RUN [--drop-raw]

Metadata (run.json, ranks/) is copied as is; ``--drop-raw`` leaves out the NCCL plugin's raw
files (already turned into tables).
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from perfscope.store import TABLES, open_run, write_rank_tables


def compact(src: Path, dst: Path, drop_raw: bool) -> None:
    run = open_run(src)
    if dst.exists():
        raise SystemExit(f"{dst} exists")
    dst.mkdir(parents=True)
    shutil.copy2(src / "run.json", dst / "run.json")
    # the source's manifests list its own parts, not the ones written below
    shutil.copytree(src / "ranks", dst / "ranks", ignore=shutil.ignore_patterns("parts-*.jsonl"))
    if not drop_raw and (src / "nccl_plugin").is_dir():
        shutil.copytree(src / "nccl_plugin", dst / "nccl_plugin")
    for rank in run.ranks:
        tables = {}
        for name in TABLES:
            df = run.table(name, ranks=[rank])
            if len(df):
                tables[name] = df.drop(columns=["rank"])
        write_rank_tables(dst, rank, tables)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--drop-raw", action="store_true")
    a = p.parse_args()
    compact(a.src, a.dst, a.drop_raw)
