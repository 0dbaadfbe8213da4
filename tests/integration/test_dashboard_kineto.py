"""The dashboard on real traces: shared Kineto files imported with `perfscope import kineto`.

Skips when ../shared/data/kineto is absent (a fresh checkout) or when this build lacks the
importer or the analyzers.
"""
from __future__ import annotations

import json
from pathlib import Path

import plotly
import pytest

from perfscope.cli.main import main

pytestmark = pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")

TRACES = {
    "ddp2": ["trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz"],
    "nccl": ["nccl_parser_config_nccl_data.json.gz"],
    "v100": ["ns_resolution_trace_rank-0.json.gz"],
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import SHARED_KINETO

    if not SHARED_KINETO.is_dir():
        pytest.skip(f"shared traces not present at {SHARED_KINETO}")
    pytest.importorskip("perfscope.store.kineto")
    try:
        from perfscope.analyzers import analyze_run  # noqa: F401
    except ImportError:
        pytest.skip("needs perfscope.analyzers.analyze_run")
    root = tmp_path_factory.mktemp("kineto")
    runs = {}
    for name, files in TRACES.items():
        out = root / name
        rc = main(["import", "kineto", *[str(SHARED_KINETO / f) for f in files], "-o", str(out)])
        assert rc == 0, f"import of {files} failed"
        runs[name] = out
    return runs


def test_every_tab_on_real_traces(imported: dict[str, Path]) -> None:
    from perfscope.dashboards import callbacks, layout, timeline_callbacks
    from perfscope.dashboards.data import DashboardData

    data = DashboardData([str(p) for p in imported.values()])
    for i, name in enumerate(imported):
        rd = data.get(i)
        assert not rd.steps.empty, f"{name}: no steps"
        for tab, _ in layout.TABS:
            content = callbacks.render_tab(data, tab, i, None)
            assert len(json.dumps(content, cls=plotly.utils.PlotlyJSONEncoder)) < 1_000_000
        sel = layout.default_selection(rd)
        fig = callbacks.timeline_figure(data, i, sel["rank"], sel["step"])
        lanes = {t.name for t in fig.data}
        assert any(" · stream " in lane for lane in lanes), (name, lanes)
        shown = len(timeline_callbacks.shown_ranks(rd, sel["rank"], None))  # lane groups drawn
        assert sum(len(t.x) for t in fig.data) <= 30 * shown * (
            timeline_callbacks.TIMELINE_WIDTH_PX + timeline_callbacks.TIMELINE_MAX_BOXES)
        rows, note, _ = callbacks.kernel_table(data, i, "all")
        assert rows and note.startswith(f"{len(rd.analysis.kernels):,} kernel rows")
    # two ranks of one job: both in the heatmap, and the collectives table has NCCL operations
    ddp = data.get(0)
    assert sorted(ddp.steps["rank"].unique()) == [0, 1]
    rows, _ = callbacks.collective_table(data, 0, "all")
    assert rows
    nccl_rows, _ = callbacks.collective_table(data, 1, "all")
    assert any("AllReduce" in str(r["func"]) for r in nccl_rows)
