"""The Timeline's drawing as pure functions: box merging, lane layout, colours, search,
names on boxes; and its callbacks on synthetic runs (steady lanes, aligned ranks, zoom,
Perfetto export, counter summary)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dashboard_fixtures import EVIL_KERNEL, EVIL_MARKER, GEMM, NCCL_KERNEL, NCCL_STREAM, analysis_for, make_run
from perfscope.analyzers.timeline import EVENT_COLUMNS
from perfscope.dashboards import layout
from perfscope.dashboards import timeline_callbacks as tc
from perfscope.dashboards.data import DashboardData
from perfscope.dashboards.timeline_boxes import aggregate_events, label_for_width, search_mask
from perfscope.dashboards.timeline_figure import KIND_COLORS, TimelineView, row_label, rows_for, timeline_figure
from perfscope.reports.style import BUCKET_COLORS

pytestmark = pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")

EVIL = "<script>alert(1)</script>"


def _events(rows: list[tuple[str, int, int, str, str]]) -> pd.DataFrame:
    """Events as timeline_events gives them, from (lane, start, dur, name, kind)."""
    df = pd.DataFrame(rows, columns=["lane", "start_ns", "dur_ns", "name", "kind"])
    df["link_lane"], df["link_start_ns"], df["link_name"] = "", -1, ""
    return df[list(EVENT_COLUMNS)].astype({"start_ns": "int64", "dur_ns": "int64", "link_start_ns": "int64"})


# -- box merging ---------------------------------------------------------------------------

def test_aggregate_events_caps_a_million_events() -> None:
    # GIVEN 1M short events over 100 ms and 10 long ones
    rng = np.random.default_rng(0)
    n = 1_000_000
    start = np.sort(rng.integers(0, 100_000_000, n))
    dur = rng.integers(1, 2_000, n)
    dur[:10] = 5_000_000
    names = np.array(["k"] * n, dtype=object)
    # WHEN aggregated for a 1000-pixel-wide lane
    boxes = aggregate_events(start, dur, names, 0, 100_000_000, width_px=1000, max_boxes=50)
    # THEN at most one box per pixel plus the long ones, and no event is lost
    assert len(boxes) <= 1000 + 50
    assert boxes["count"].sum() == n
    assert (boxes["dur_ns"] >= 5_000_000).sum() >= 10
    assert boxes["label"].str.contains(" events \\(e.g. k\\)").any()
    assert boxes["start_ns"].is_monotonic_increasing


def test_aggregate_events_keeps_wide_events_whole_and_caps_them() -> None:
    start = np.arange(0, 1000, 10)
    dur = np.full(100, 9)
    names = [f"e{i}" for i in range(100)]
    whole = aggregate_events(start, dur, names, 0, 1000, width_px=100)  # 10 ns per pixel... 9 < 10
    assert len(whole) == 100 and whole["count"].eq(1).all() and whole["label"].iloc[3] == "e3"
    capped = aggregate_events(start, dur + 100, names, 0, 1000, width_px=100, max_boxes=7)
    assert capped["count"].sum() == 100
    assert (capped["count"] == 1).sum() >= 7
    # a box of one event points back at its row (for its launch link); a box of several does not
    merged = aggregate_events(start, dur, names, 0, 1000, width_px=10)  # 100 ns per pixel: 10 events each
    assert set(merged["row"]) == {-1} and set(merged["count"]) == {10}
    assert (capped["row"] >= 0).all()
    assert (capped["start_ns"].to_numpy() == start[capped["row"].to_numpy()]).all()
    empty = aggregate_events(np.array([]), np.array([]), [], 0, 10)
    assert empty.empty and list(empty.columns) == ["start_ns", "dur_ns", "label", "count", "busy", "kind", "row"]


def test_merged_boxes_report_how_busy_they_are() -> None:
    # 10 events of 1 ns, all inside one 100-ns pixel: the box is 10% busy
    start = np.arange(0, 100, 10)
    boxes = aggregate_events(start, np.ones(10, "int64"), ["k"] * 10, 0, 1000, width_px=10)
    assert len(boxes) == 1 and boxes["count"].iloc[0] == 10
    assert boxes["busy"].iloc[0] == pytest.approx(10 / 100)


def test_a_merged_box_takes_the_colour_of_its_longest_event() -> None:
    # one pixel: a 1 ns kernel and a 40 ns NCCL kernel; the next pixel: compute only
    boxes = aggregate_events(np.array([0, 10, 120]), np.array([1, 40, 5]), ["k", "nccl", "k"], 0, 1000,
                             width_px=10, kinds=["compute", "network", "compute"])
    assert boxes["kind"].tolist() == ["network", "compute"] and boxes["count"].tolist() == [2, 1]


def test_a_sparse_stream_is_drawn_as_a_faint_thin_strip_not_a_busy_block() -> None:
    # 0.9 µs kernels every 100 µs over 10 ms, on a 1000 px lane (10 µs per pixel)
    start = np.arange(0, 10_000_000, 100_000)
    ev = _events([("stream 7", int(s), 900, "tiny", "compute") for s in start])
    fig = timeline_figure(TimelineView(rows=[(0, "stream 7")], events={0: ev}, t0_ns=0, t1_ns=10_000_000,
                                       origin_ns=0, width_px=1000))
    bar = fig.data[0]
    assert len(bar.x) == 100
    assert set(bar.width) == {0.3}  # a strip a third of the lane's height ...
    assert max(bar.marker.opacity) < 0.25  # ... faint: 9% busy
    assert max(bar.x) == pytest.approx(0.01)  # one pixel (0.01 ms), where the kernel is
    # while a kernel wider than a pixel is a full-height box at its true width
    wide = _events([("stream 7", 1_000_000, 2_000_000, GEMM, "compute")])
    bar = timeline_figure(TimelineView(rows=[(0, "stream 7")], events={0: wide}, t0_ns=0, t1_ns=10_000_000,
                                       origin_ns=0, width_px=1000)).data[0]
    assert list(bar.width) == [0.8] and list(bar.x) == [pytest.approx(2.0)] and list(bar.marker.opacity) == [1.0]


# -- names, search ---------------------------------------------------------------------------

def test_names_are_drawn_on_boxes_only_when_they_fit() -> None:
    assert label_for_width(GEMM, 400) == GEMM
    cut = label_for_width(GEMM, 80)
    assert cut.endswith("…") and GEMM.startswith(cut[:-1]) and len(cut) <= 80 / 6.5
    assert label_for_width(GEMM, 20) == ""


def test_search_is_plain_text_and_case_insensitive() -> None:
    names = np.array([GEMM, "ncclKernel", EVIL, GEMM], dtype=object)
    assert search_mask(names, "SGEMM").tolist() == [True, False, False, True]
    assert search_mask(names, ".*").tolist() == [False] * 4  # not a pattern
    assert search_mask(names, "<script>").tolist() == [False, False, True, False]
    assert not search_mask(names, "  ").any() and not search_mask(names, None).any()


def test_search_outlines_the_matches_and_fades_the_rest() -> None:
    ev = _events([("stream 7", 0, 10, GEMM, "compute"), ("stream 7", 5_000, 3_000_000, "other", "compute"),
                  ("stream 20", 100, 10, NCCL_KERNEL, "network")])
    rows = [(0, "stream 7"), (0, "stream 20")]
    fig = timeline_figure(TimelineView(rows=rows, events={0: ev}, t0_ns=0, t1_ns=10_000_000, origin_ns=0,
                                       search="sgemm", width_px=1000))
    match = fig.data[-1]
    assert match.name == "search matches" and list(match.y) == [0]
    assert match.marker.line.width == 2 and list(match.x) == [pytest.approx(0.01)]  # a sub-pixel match, one pixel
    assert "1 match for" in fig.layout.title.text
    assert all(max(t.marker.opacity) <= 0.3 for t in fig.data[:-1])


# -- layout, colours ---------------------------------------------------------------------------

def test_rows_are_rank_groups_with_counters_and_a_separator_between_ranks() -> None:
    rows = rows_for([0, 3], {0: ["NVTX default", "stream 7"], 3: ["stream 7", "NCCL"]}, {3: ["sm_util_pct"]})
    assert rows == [(0, "NVTX default"), (0, "stream 7"), (3, "stream 7"), (3, "NCCL"), (3, "GPU util (%)")]
    ev = {0: _events([("stream 7", 0, 1_000_000, GEMM, "compute")]),
          3: _events([("NCCL", 0, 1_000_000, "AllReduce", "network")])}
    fig = timeline_figure(TimelineView(rows=rows, events=ev, t0_ns=0, t1_ns=2_000_000, origin_ns=0))
    assert list(fig.layout.yaxis.ticktext) == [row_label(r, lane) for r, lane in rows]
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2, 3, 4]
    assert [s.y0 for s in fig.layout.shapes] == [1.5]  # one line between rank 0 and rank 3
    # lanes keep their row whether or not they hold events (rank 0's NVTX lane is empty here)
    assert {t.name: t.y[0] for t in fig.data} == {"rank 0 · stream 7": 1, "rank 3 · NCCL": 3}


def test_colours_are_the_buckets_colours() -> None:
    ev = _events([("stream 7", 0, 1_000_000, GEMM, "compute"), ("stream 20", 0, 1_000_000, NCCL_KERNEL, "network"),
                  ("sync", 0, 1_000_000, "synchronize stream", "sync"), ("copies", 0, 1_000_000, "H2D", "pcie"),
                  ("host: dataloader_wait", 0, 1_000_000, "next", "data_loading")])
    rows = [(0, lane) for lane in ev["lane"]]
    fig = timeline_figure(TimelineView(rows=rows, events={0: ev}, t0_ns=0, t1_ns=2_000_000, origin_ns=0))
    colours = {t.name.split(" · ")[1]: t.marker.color[0] for t in fig.data}
    assert colours == {"stream 7": BUCKET_COLORS["compute"], "stream 20": BUCKET_COLORS["network"],
                       "sync": BUCKET_COLORS["sync"], "copies": BUCKET_COLORS["pcie"],
                       "host: dataloader_wait": BUCKET_COLORS["data_loading"]}
    assert KIND_COLORS["network"] != KIND_COLORS["sync"]


def test_hostile_names_are_escaped_everywhere() -> None:
    n = 200_000
    ev = _events([("host: dataloader_wait", 0, 1_000_000, "DataLoader", "data_loading"),
                  ("NVTX default", 10, 500_000, EVIL, "marker")]
                 + [("stream 7", int(s), 20, "gemm", "compute") for s in np.linspace(0, 9_000_000, 2000)])
    ev = pd.concat([ev] + [ev.iloc[2:]] * (n // 2000), ignore_index=True)
    rows = [(0, "host: dataloader_wait"), (0, "NVTX default"), (0, "stream 7")]
    fig = timeline_figure(TimelineView(rows=rows, events={0: ev}, t0_ns=0, t1_ns=10_000_000, origin_ns=0,
                                       title=EVIL, search=EVIL, width_px=800))
    assert [t.name for t in fig.data][:3] == [row_label(0, lane) for _, lane in rows]
    assert len(fig.data[2].x) <= 800 + 2000
    payload = fig.to_json()
    assert EVIL not in payload and "&lt;script&gt;" in payload
    assert len(payload) < 400_000
    assert "drawn as" in fig.layout.title.text


def test_window_and_origin() -> None:
    ev = _events([("sync", 5_000_000, 1_000_000, "s", "sync")])
    fig = timeline_figure(TimelineView(rows=[(0, "sync")], events={0: ev}, t0_ns=4_000_000, t1_ns=8_000_000,
                                       origin_ns=2_000_000))
    assert list(fig.layout.xaxis.range) == [2.0, 6.0]
    assert fig.data[0].base[0] == pytest.approx(3.0) and fig.data[0].x[0] == pytest.approx(1.0)
    empty = timeline_figure(TimelineView(rows=[], events={}, t0_ns=0, t1_ns=1, origin_ns=0))
    assert empty.layout.annotations


# -- callbacks on synthetic runs ------------------------------------------------------------------

@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> DashboardData:
    root = tmp_path_factory.mktemp("runs")
    make_run(root / "a", ranks=3, steps=4)
    return DashboardData([str(root / "a")], analyze=analysis_for)


def _lanes(fig: object) -> list[str]:
    return list(fig.layout.yaxis.ticktext)  # type: ignore[attr-defined]


def test_all_ranks_are_aligned_on_one_axis_with_steady_lanes(data: DashboardData) -> None:
    rd = data.get(0)
    fig = tc.timeline_figure_of(data, 0, 1, 12)
    per_rank = ["NVTX default", "host: dataloader_wait", "host: optimizer_step", "stream 7", f"stream {NCCL_STREAM}",
                "copies", "NCCL", "sync"]
    assert _lanes(fig) == [row_label(r, lane) for r in (0, 1, 2) for lane in per_rank]
    assert fig.layout.title.text.startswith("rank 1, step 12 · 3 ranks aligned (")
    # one axis: the straggler (rank 2) runs 3 ms longer; the window spans every rank's step
    t0, t1, origin = tc.step_span(rd, [0, 1, 2], 1, 12)
    assert origin == rd.step_window(1, 12)[0] and t1 - t0 == rd.step_window(2, 12)[1] - rd.step_window(2, 12)[0]
    # zooming keeps every lane in its row, also lanes with nothing in the window
    zoomed, *_ = tc.timeline_update(data, 0, 1, 12, {"xaxis.range[0]": 15.0, "xaxis.range[1]": 15.2}, "tl-zoom")
    assert _lanes(zoomed) == _lanes(fig)
    # on one clock: ranks 0 and 1 are inside their exposed all-reduce (72-85% of a 20 ms step),
    # the straggler, whose step lasts 23 ms, is still in its backward pass
    assert {t.name for t in zoomed.data} == {row_label(r, lane) for r in (0, 1) for lane in
                                             (f"stream {NCCL_STREAM}", "NCCL")} | {
        row_label(2, "stream 7"), row_label(2, "NVTX default")}
    assert list(zoomed.layout.xaxis.range) == pytest.approx([15.0, 15.2])


def test_ranks_shown_search_and_window_survive_each_other(data: DashboardData) -> None:
    zoom = {"xaxis.range[0]": 2.0, "xaxis.range[1]": 4.0}
    fig, options, value, sel, window = tc.timeline_update(data, 0, 0, 11, zoom, "tl-zoom", [0, 2], "", None)
    # the zoom goes into the selection (ms since the focus rank's step start), so into the URL
    assert options is None and value is None and sel == {"run": 0, "rank": 0, "step": 11, "zoom": [2.0, 4.0]}
    assert {r for r, _ in [(int(t.split(" ")[1]), 0) for t in _lanes(fig)]} == {0, 2}
    origin = data.get(0).step_window(0, 11)[0]
    assert window == {"t0": origin + 2_000_000, "t1": origin + 4_000_000}
    # a search keeps the zoom and the ranks
    fig, _, _, sel2, window2 = tc.timeline_update(data, 0, 0, 11, zoom, "tl-search", [0, 2], "sgemm", window)
    assert sel2 is None and window2 == window and list(fig.layout.xaxis.range) == pytest.approx([2.0, 4.0])
    assert fig.data[-1].name == "search matches" and "matches for “sgemm”" in fig.layout.title.text
    # a new step shows the whole step again
    fig, _, _, sel, window3 = tc.timeline_update(data, 0, 0, 12, zoom, "tl-step", [0, 2], "", window)
    assert sel == {"run": 0, "rank": 0, "step": 12} and window3["t1"] - window3["t0"] > 20_000_000
    # the focus rank is always shown; by default all ranks (up to MAX_DEFAULT_RANKS)
    rd = data.get(0)
    assert tc.shown_ranks(rd, 1, [2]) == [1, 2] and tc.shown_ranks(rd, 1, None) == [0, 1, 2]


def test_a_search_for_a_hostile_name_finds_it_and_keeps_it_text(data: DashboardData) -> None:
    fig = tc.timeline_figure_of(data, 0, 0, 11, search=EVIL_KERNEL)
    payload = fig.to_json()
    assert EVIL_KERNEL not in payload and EVIL_MARKER not in payload
    # every third of the 30 compute kernels per step is named so, on each of the 3 ranks
    assert "30 matches for" in fig.layout.title.text and len(fig.data[-1].x) == 30


def test_perfetto_export_holds_the_window_of_the_shown_ranks(data: DashboardData, tmp_path: Path) -> None:
    rd = data.get(0)
    origin = rd.step_window(0, 11)[0]
    # inside the exposed all-reduce (14.4-17.0 ms): only what spans the window is exported
    window = {"t0": origin + 15_000_000, "t1": origin + 15_200_000}
    out = tc.perfetto_export(data, 0, 0, 11, [0, 1], window)
    assert out["filename"].endswith(".json") and out["base64"]
    trace = json.loads(base64.b64decode(out["content"]))
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert {e["name"] for e in events} >= {NCCL_KERNEL}
    assert all(e["name"] != GEMM for e in events)  # no compute kernel runs in that window
    ranks = {b["rank"] for b in trace["perfscope"]["ranks"]}
    assert ranks == {0, 1}
    base = trace["baseTimeNanoseconds"]
    for e in events:  # every event overlaps the window
        s = base + e["ts"] * 1e3
        assert s < window["t1"] and s + e.get("dur", 0) * 1e3 > window["t0"] - 1e3, e


def test_overview_counters_say_when_there_are_none(data: DashboardData) -> None:
    div = layout.overview_counters(data.get(0))
    assert div.id == "gpu-counters" and "No GPU counter samples" in json.dumps(div.to_plotly_json(), default=str)
    # the Overview shows them (here: why there are none)
    overview = json.dumps(layout.overview(data.get(0)).to_plotly_json(), default=str)
    assert "gpu-counters" in overview and "NVML sampler did not run" in overview
