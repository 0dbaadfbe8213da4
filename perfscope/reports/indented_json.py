"""Indented JSON text, byte for byte what ``json.dumps(obj, indent=N, allow_nan=False)``
writes, several times faster.

With ``indent`` set, the standard library encodes in pure Python (its C encoder only
writes compact text), which took most of the time of ``perfscope analyze --format json``'s
output.  Here every container whose items are all scalars (an analysis document's table
rows, most of it) goes through the C encoder with the indented separators
(``",\\n" + padding``, ``": "``), and only the few containers above them are joined here.
Anything else (tuples, non-text keys, empty containers) goes through ``json.dumps``
itself, re-indented to its depth (JSON text has no raw newline inside strings).
"""
from __future__ import annotations

import functools
import json
from typing import Any

_SCALARS = (str, int, float, bool, type(None))


@functools.cache
def _encoder(pad: str, ensure_ascii: bool) -> json.JSONEncoder:
    """The C-backed encoder of one flat container whose items sit at ``pad``."""
    return json.JSONEncoder(allow_nan=False, ensure_ascii=ensure_ascii, separators=(",\n" + pad, ": "))


def dumps(obj: Any, indent: int = 1, ensure_ascii: bool = True) -> str:
    """``json.dumps(obj, indent=indent, allow_nan=False, ensure_ascii=ensure_ascii)``.

    Raises:
        ValueError: a NaN or infinite float (as ``json.dumps`` with ``allow_nan=False``).
        TypeError: a value JSON cannot hold.
    """
    return _dumps(obj, 0, indent, ensure_ascii)


def _dumps(v: Any, depth: int, indent: int, ensure_ascii: bool) -> str:
    outer, pad = " " * (depth * indent), " " * ((depth + 1) * indent)
    if isinstance(v, dict) and v and all(type(k) is str for k in v):
        values = v.values()
        if all(isinstance(x, _SCALARS) for x in values):
            return "{\n" + pad + _encoder(pad, ensure_ascii).encode(v)[1:-1] + "\n" + outer + "}"
        key = _encoder("", ensure_ascii).encode
        items = (pad + key(k) + ": " + _dumps(x, depth + 1, indent, ensure_ascii) for k, x in v.items())
        return "{\n" + ",\n".join(items) + "\n" + outer + "}"
    if isinstance(v, list) and v:
        if all(isinstance(x, _SCALARS) for x in v):
            return "[\n" + pad + _encoder(pad, ensure_ascii).encode(v)[1:-1] + "\n" + outer + "]"
        return "[\n" + ",\n".join(pad + _dumps(x, depth + 1, indent, ensure_ascii) for x in v) + "\n" + outer + "]"
    text = json.dumps(v, indent=indent, allow_nan=False, ensure_ascii=ensure_ascii)
    return text.replace("\n", "\n" + outer) if depth else text


__all__ = ["dumps"]
