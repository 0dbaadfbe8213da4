"""Writing a report file: checked before the work that makes it, replaced atomically.

The one file writer of the CLI (``perfscope report -o``, ``perfscope compare -o``); the store
has its own for run metadata (:func:`perfscope.store.meta.atomic_write_json`).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from perfscope.errors import RunExistsError


def check_output(path: str | os.PathLike[str], *, force: bool) -> Path:
    """Refuse an output file that exists unless ``force``, before any costly work.

    Returns:
        ``path`` as a Path.

    Raises:
        RunExistsError: the file exists and ``force`` is false.
    """
    p = Path(path)
    if p.exists() and not force:
        raise RunExistsError(f"{p} already exists; choose another -o FILE or pass --force to replace it")
    return p


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder and a
    rename, so a crash or a full disk never leaves half a report; missing folders are made.

    Returns:
        ``path`` as a Path.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return p


__all__ = ["check_output", "write_atomic"]
