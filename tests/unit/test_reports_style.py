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


@pytest.mark.parametrize(("ns", "text"), [
    (820, "820 ns"), (999.6, "1.00 µs"), (1_500, "1.50 µs"), (12_345, "12.3 µs"), (123_456, "123 µs"),
    (999_600, "1.00 ms"), (1_670_000, "1.67 ms"), (33_872_342, "33.9 ms"), (647_016_285, "647 ms"),
    (2.5e9, "2.50 s"), (float("nan"), "–"), (None, "–"),
])
def test_fmt_duration_keeps_three_digits_at_fixed_decimals(ns: float | None, text: str) -> None:
    assert style.fmt_duration(ns) == text


def test_fmt_ms_fmt_share_fmt_gbps() -> None:
    assert style.fmt_ms(201_196_902) == "201 ms" and style.fmt_ms(62_332_451) == "62.3 ms"
    assert style.fmt_ms(1_670_000) == "1.67 ms" and style.fmt_ms(148_000) == "0.148 ms"
    assert style.fmt_share(0.9646) == "96.5%" and style.fmt_share(float("nan")) == "–"
    assert style.fmt_gbps(0.200793) == "0.201 GB/s" and style.fmt_gbps(187.4) == "187 GB/s"


def test_fmt_change_never_says_plus_zero_milliseconds() -> None:
    # issue #18: "+0.00 ms (+7%)" for a 140 µs change
    assert style.fmt_change(140_000, 2_000_000) == "+140 µs (+7.0%)"
    assert style.fmt_change(-2_100_000) == "-2.10 ms"
    assert style.fmt_change(1e-9, 2e6) == "no change" and style.fmt_change(float("nan")) == "–"


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("cost_to_others_ns", 647016285, ("cost to others", "647 ms")),
    ("others_wait_ns_per_step", 28554726, ("others wait per step", "28.6 ms")),
    ("network_share", 0.9646, ("network share", "96.5%")),
    ("bytes", 4 << 20, ("bytes", "4 MiB")),
    ("busbw_gbps", 187.4, ("busbw", "187 GB/s")),
    ("last_count", 7, ("last count", "7")),
    ("kernel", "<b>", ("kernel", "<b>")),
])
def test_evidence_is_shown_with_units_not_raw_nanoseconds(key: str, value: object, shown: tuple[str, str]) -> None:
    assert style.fmt_evidence(key, value) == shown


def test_hover_text_is_escaped_and_bounded() -> None:
    text = style.hover_text("k" * 500 + "<script>", width=60, lines=3)
    lines = text.split("<br>")
    assert len(lines) == 3 and all(len(line) <= 60 for line in lines)
    assert "<script>" not in text and text.endswith("…")
    assert style.hover_text("a<b") == "a&lt;b"


def test_distributed_view_colours_stay_apart() -> None:
    assert style.COMM_COLORS["exposed_comm"] == style.BUCKET_COLORS["network"]
    assert style.COMM_COLORS["wait"] == style.BUCKET_COLORS["sync"]
    assert len(set(style.COMM_COLORS.values())) == len(style.COMM_COLORS)
    assert style.STRAGGLER_COLOR != style.OTHER_RANK_COLOR
