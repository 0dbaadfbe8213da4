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
# The distributed view (TensorBoard's computation / overlap / communication / other): the
# exposed parts take their bucket's colour; communication hidden under computation is a
# light tint of the network colour, so it reads as "communication, but free".
COMM_COLORS: dict[str, str] = {
    "compute": BUCKET_COLORS["compute"],
    "hidden_comm": "#F3D38A",
    "exposed_comm": BUCKET_COLORS["network"],
    "wait": BUCKET_COLORS["sync"],
    "other": BUCKET_COLORS["host"],
}
COMM_LABELS: dict[str, str] = {
    "compute": "computation", "hidden_comm": "communication hidden by computation",
    "exposed_comm": "exposed communication", "wait": "waiting for other ranks (sync)", "other": "other",
}
# The rank that holds the others up, and every other rank, in rankings.
STRAGGLER_COLOR = WORSE_COLOR
OTHER_RANK_COLOR = BASE_COLOR
# Warm-up steps where they are drawn at all (hatched, in a muted tone).
WARMUP_COLOR = "#d0d5dd"
# Waits on a heatmap: white (none) to the sync colour to dark (the most), so the darkest
# cell is the longest wait, never the shortest.
WAIT_COLORSCALE: list[list[object]] = [[0.0, "#ffffff"], [0.5, BUCKET_COLORS["sync"]], [1.0, "#4a1038"]]
# Step times on a heatmap: light (short) to dark blue (long).
TIME_COLORSCALE: list[list[object]] = [[0.0, "#f7fbff"], [0.5, "#6baed6"], [1.0, "#08306b"]]
# Hover labels: at most this many characters per line and this many lines of a name.
HOVER_WIDTH = 60
HOVER_LINES = 3

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


def _fixed(x: float) -> str:
    """``x`` with 3 significant digits as fixed decimals: 647, 33.9, 1.67, 0.148."""
    def digits(a: float) -> int:
        return 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 else 3
    d = digits(abs(x))
    d = digits(round(abs(x), d))  # 9.996 is shown as 10.0, not 10.00
    return f"{x:,.{d}f}"


def fmt_duration(ns: float | None) -> str:
    """A duration with the unit that suits it and 3 significant digits at fixed decimals
    per magnitude (``647 ms``, ``33.9 ms``, ``1.50 µs``, ``820 ns``); ``–`` for unknown.

    Unlike :func:`fmt_ns` (used by the text reports), a column of these lines up: every
    value of a magnitude has the same number of decimals.
    """
    if ns is None or not math.isfinite(ns):
        return "–"
    a = abs(ns)
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if a >= 0.9995 * scale:  # 999.6 µs rounds to 1.00 ms, not 1,000 µs
            return f"{_fixed(ns / scale)} {unit}"
    return f"{ns:.0f} ns"


def fmt_ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds with 3 significant digits (``201 ms``, ``62.4 ms``,
    ``1.67 ms``, ``0.148 ms``): for values read side by side in one unit; ``–`` for unknown."""
    if ns is None or not math.isfinite(ns):
        return "–"
    return f"{_fixed(ns / 1e6)} ms"


def fmt_change(delta_ns: float | None, base_ns: float | None = None) -> str:
    """A signed change of a duration, with its share of ``base_ns`` when known:
    ``+140 µs (+7.0%)``, ``-2.10 ms``, ``no change``; never ``+0.00 ms (+7%)``."""
    if delta_ns is None or not math.isfinite(delta_ns):
        return "–"
    if round(delta_ns) == 0:  # float noise of a difference of means
        return "no change"
    text = ("+" if delta_ns > 0 else "-") + fmt_duration(abs(delta_ns))
    if base_ns and math.isfinite(base_ns):
        text += f" ({fmt_pct(delta_ns / base_ns)})"
    return text


def fmt_share(x: float | None, digits: int = 1) -> str:
    """A share (0..1) as an unsigned percentage (``96.5%``); ``–`` for unknown."""
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x * 100:.{digits}f}%"


def fmt_gbps(x: float | None) -> str:
    """A bandwidth in GB/s (10^9 bytes per second) with 3 significant digits; ``–`` for unknown."""
    if x is None or not math.isfinite(x):
        return "–"
    return f"{_fixed(x)} GB/s"


_EVIDENCE_UNITS = ("ns", "bytes", "gbps", "share", "pct")


def _evidence_unit(key: str) -> tuple[str, str]:
    """(the key's words without its unit, the unit) of an evidence key: ``wait_ns`` ->
    (``wait``, ``ns``); ``others_wait_ns_per_step`` -> (``others wait per step``, ``ns``)."""
    words = key.split("_")
    for unit in _EVIDENCE_UNITS:
        if unit in words:
            rest = [w for w in words if w != unit] if unit != "share" else words
            return " ".join(rest or words), unit
    return " ".join(words), ""


def fmt_evidence(key: str, value: object) -> tuple[str, str]:
    """One piece of a recommendation's evidence for people: (label, value with its unit).

    ``("cost_to_others_ns", 647016285)`` -> ``("cost to others", "647 ms")``;
    ``("network_share", 0.9646)`` -> ``("network share", "96.5%")``; lists and dicts are
    shortened to one line (:func:`short`).
    """
    label, unit = _evidence_unit(str(key))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return label, short(value, 120)
    if unit == "ns":
        return label, fmt_duration(float(value))
    if unit == "bytes":
        return label, fmt_bytes(float(value))
    if unit == "gbps":
        return label, fmt_gbps(float(value))
    if unit == "share":
        return label, fmt_share(float(value))
    if unit == "pct":
        return label, f"{float(value):.1f}%"
    return label, (f"{value:,}" if isinstance(value, int) else f"{value:.4g}")


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


def hover_text(text: object, width: int = HOVER_WIDTH, lines: int = HOVER_LINES) -> str:
    """Untrusted text for a plotly hover label of bounded width: one line (:func:`short`),
    cut to ``width * lines`` characters, escaped, and broken into lines of at most ``width``
    characters (``<br>``, which plotly renders) so a long C++ kernel name does not make a
    label thousands of pixels wide."""
    s = short(text, width * lines)
    return "<br>".join(html.escape(s[i:i + width], quote=True) for i in range(0, len(s), width)) if s else ""


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
    "COMM_COLORS",
    "COMM_LABELS",
    "HOVER_LINES",
    "HOVER_WIDTH",
    "OTHER_RANK_COLOR",
    "STRAGGLER_COLOR",
    "TIME_COLORSCALE",
    "WAIT_COLORSCALE",
    "WARMUP_COLOR",
    "IDLE_COLOR",
    "NEW_COLOR",
    "WORSE_COLOR",
    "cut",
    "escape_html",
    "fmt_bytes",
    "fmt_change",
    "fmt_delta_ns",
    "fmt_duration",
    "fmt_evidence",
    "fmt_gbps",
    "fmt_interval",
    "fmt_ns",
    "fmt_ms",
    "fmt_pct",
    "fmt_share",
    "hover_text",
    "md_cell",
    "md_code",
    "ms",
    "short",
    "xml_text",
]
