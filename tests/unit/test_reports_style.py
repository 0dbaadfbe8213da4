"""The style every renderer and the dashboard share: one colour per bucket, escaping, numbers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfscope.analyzers.result import BUCKET_COLUMNS, BUCKETS

from perfscope.reports import figures as report_figures
from perfscope.reports import style

EVIL = 'k<float, 2>|`x`</script>&"\x01\\*_[y]\nnext'


def _steps(n: int = 3) -> pd.DataFrame:
    rows = {"rank": np.zeros(n, np.int64), "step": np.arange(n), "wall_ns": np.full(n, 6_000_000)}
    rows.update({c: np.full(n, 1_000_000) for c in BUCKET_COLUMNS})
    return pd.DataFrame(rows)


def _bucket_colours(fig: object) -> dict[str, str]:
    return {trace.name: trace.marker.color for trace in fig.data}  # type: ignore[attr-defined]


def test_html_report_and_dashboard_draw_each_bucket_in_the_same_colour() -> None:
    pytest.importorskip("dash")
    from perfscope.dashboards import figures as dash_figures

    report = _bucket_colours(report_figures.step_buckets_figure(_steps()))
    dashboard = _bucket_colours(dash_figures.bucket_bars_by_step(_steps()))
    assert set(report) == set(dashboard) == {style.BUCKET_LABELS[b] for b in BUCKETS}
    assert report == dashboard
    assert report[style.BUCKET_LABELS["network"]] == style.BUCKET_COLORS["network"]


def test_every_bucket_has_its_own_colour_and_network_is_not_sync() -> None:
    assert set(style.BUCKET_COLORS) == set(BUCKETS)
    assert len(set(style.BUCKET_COLORS.values())) == len(BUCKETS)

    def hue(colour: str) -> float:
        import colorsys

        r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
        return 360 * colorsys.rgb_to_hsv(r, g, b)[0]

    gap = abs(hue(style.BUCKET_COLORS["network"]) - hue(style.BUCKET_COLORS["sync"])) % 360
    assert min(gap, 360 - gap) > 60  # clearly different hues, not two oranges


def test_escape_html_cuts_then_escapes_and_blanks_missing_values() -> None:
    assert style.escape_html("<b>") == "&lt;b&gt;"
    assert style.escape_html('"x" & y') == "&quot;x&quot; &amp; y"
    assert style.escape_html("abcdef", 4) == "abc…"
    assert style.escape_html(None) == "" and style.escape_html(float("nan")) == ""


def test_md_cell_is_one_safe_cell() -> None:
    cell = style.md_cell(EVIL, 200)
    assert "\n" not in cell and "\x01" not in cell and "<" not in cell
    assert "\\|" in cell and "\\`" in cell and "\\*" in cell and "\\_" in cell and "\\[" in cell and "\\\\" in cell
    assert style.md_cell("a" * 100, 10) == "a" * 9 + "…"


def test_md_code_and_xml_text() -> None:
    assert style.md_code("a`b\nc") == "`a'b c`"
    assert style.xml_text("ok\x01") == "ok\ufffd"


@pytest.mark.parametrize(("ns", "text"), [(512, "512 ns"), (1500, "1.5 µs"), (2.5e6, "2.5 ms"), (3e9, "3 s"),
                                          (float("nan"), "–")])
def test_fmt_ns(ns: float, text: str) -> None:
    assert style.fmt_ns(ns) == text


def test_number_formats() -> None:
    assert style.ms(1_234_500_000) == "1,234.50"
    assert style.fmt_delta_ns(-2e6) == "-2 ms" and style.fmt_delta_ns(0) == "±0 ns"
    assert style.fmt_pct(0.1234) == "+12.3%" and style.fmt_interval(0.01, 0.02) == "+1.0% … +2.0%"
    assert style.fmt_bytes(1 << 20) == "1 MiB" and style.fmt_bytes(None) == "?"
