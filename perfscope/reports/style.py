"""One look for every report and the dashboard: bucket colours and labels, number and unit
formatting, shortening and escaping of untrusted text.

Every name that comes from a trace (kernels, markers, labels, recommendation text) is
untrusted: HTML and plotly labels get :func:`escape_html`, Markdown gets :func:`md_cell` or
:func:`md_code`, XML gets :func:`xml_text`, and terminal output is built from plain rich
``Text`` objects, never markup.
"""
from __future__ import annotations

import html
import math
import re

from perfscope.analyzers.result import BUCKETS

# One colour per bucket, the same in every figure of the HTML reports and the dashboard.
# Okabe-Ito (colour-blind safe); network and sync, which a reader tells apart most often,
# are orange and reddish purple.
BUCKET_COLORS: dict[str, str] = {
    "compute": "#0072B2",
    "network": "#E69F00",
    "sync": "#CC79A7",
    "pcie": "#D55E00",
    "data_loading": "#009E73",
    "host": "#999999",
}
# How a bucket is named in a legend (tables keep the bucket ids, which JSON keys also use).
BUCKET_LABELS: dict[str, str] = {b: b.replace("_", " ") for b in BUCKETS}
# GPU time no bucket covers (idle in the HTA-style summary).
IDLE_COLOR = "#bdbdbd"
# The two sides of a comparison, and a change for the worse or the better.
BASE_COLOR = "#98a2b3"
NEW_COLOR = "#1570ef"
WORSE_COLOR = "#d92d20"
BETTER_COLOR = "#12b76a"

ELLIPSIS = "…"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_XML_BAD = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\|`*_[]"})


# -- numbers ------------------------------------------------------------------------------


def ms(ns: float) -> str:
    """Nanoseconds as milliseconds with 2 decimals and thousands separators (``1,234.50``)."""
    return f"{ns / 1e6:,.2f}"


def fmt_ns(ns: float | None) -> str:
    """A duration in nanoseconds with a unit that keeps 3-4 significant digits; ``–`` for NaN."""
    if ns is None or not math.isfinite(ns):
        return "–"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3g} s" if a < 1e11 else f"{ns / 1e9:,.0f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.4g} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.4g} µs"
    return f"{ns:.0f} ns"


def fmt_delta_ns(ns: float | None) -> str:
    """Like :func:`fmt_ns` with an explicit sign."""
    if ns is None or not math.isfinite(ns):
        return "–"
    return ("+" if ns > 0 else "-" if ns < 0 else "±") + fmt_ns(abs(ns))


def fmt_pct(x: float | None, digits: int = 1) -> str:
    """A share as a signed percentage (``+10.2%``); ``–`` for NaN."""
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x * 100:+.{digits}f}%"


def fmt_interval(lo: float, hi: float) -> str:
    """An interval of shares: ``+6.1% … +14.0%``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "–"
    return f"{fmt_pct(lo)} … {fmt_pct(hi)}"


def fmt_bytes(n: float | None) -> str:
    """A byte count with binary units (``?`` when unknown)."""
    if n is None or not math.isfinite(n) or n < 0:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n} B"


# -- untrusted text -----------------------------------------------------------------------


def cut(text: object, limit: int | None) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks a cut)."""
    s = str(text)
    return s if limit is None or len(s) <= limit else s[: limit - 1] + ELLIPSIS


def short(name: object, width: int = 90) -> str:
    """``name`` as one line of at most ``width`` characters: whitespace runs become one space
    and control characters, which would corrupt a terminal or break XML/Markdown, go."""
    return cut(_CONTROL.sub("", " ".join(str(name).split())), width)


def escape_html(text: object, limit: int | None = None) -> str:
    """Untrusted text for HTML and plotly labels (which render an HTML subset): cut to
    ``limit`` characters, then escaped (quotes too); None and NaN are empty."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return ""
    return html.escape(cut(text, limit), quote=True)


def md_cell(text: object, limit: int = 90) -> str:
    """Untrusted text for a Markdown table cell or line: one line (:func:`short`), no HTML,
    and no character that starts Markdown syntax or would end the cell."""
    return html.escape(short(text, limit), quote=False).translate(_MD_SPECIAL)


def md_code(text: object, limit: int = 300) -> str:
    """Untrusted text as an inline code span (no escapes are processed inside one, so only
    backticks and newlines are replaced)."""
    s = cut(str(text).replace("`", "'").replace("\r", " ").replace("\n", " "), limit)
    return f"`{s}`"


def xml_text(text: object) -> str:
    """Text safe for XML 1.0: the serializer escapes ``<&"``; this replaces the characters
    XML forbids."""
    return _XML_BAD.sub("\ufffd", str(text))


__all__ = [
    "BASE_COLOR",
    "BETTER_COLOR",
    "BUCKET_COLORS",
    "BUCKET_LABELS",
    "IDLE_COLOR",
    "NEW_COLOR",
    "WORSE_COLOR",
    "cut",
    "escape_html",
    "fmt_bytes",
    "fmt_delta_ns",
    "fmt_interval",
    "fmt_ns",
    "fmt_pct",
    "md_cell",
    "md_code",
    "ms",
    "short",
    "xml_text",
]
