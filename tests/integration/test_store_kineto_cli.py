"""`perfscope import kineto`, `perfscope export chrome` and `perfscope info` end to end.

Through the real CLI entry point (``perfscope.cli.main.main``, which returns the exit code)
on the repo's synthetic fixtures and on the shared real traces.
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
import pandas as pd
import pytest

from perfscope.cli.main import main
from perfscope.store import open_run
from perfscope.store.chrome import export_chrome
from perfscope.store.kineto import import_kineto

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "kineto"
DDP = [FIXTURES / "ddp_rank0.json.gz", FIXTURES / "ddp_rank1.json.gz"]
SINGLE = FIXTURES / "single_gpu_absolute.json"
ROUND_TRIP_TABLES = ("kernels", "memcpy", "memset", "sync", "api", "markers", "steps", "collectives", "host", "metrics")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``perfscope ARGV``; return (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` with its bytes (to prove a run was left untouched)."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def kernel_events(path: Path) -> int:
    """Kernel events in a trace file, counted with a plain json load."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel")


def assert_same_tables(a: Path, b: Path) -> None:
    """Every column of every table of runs ``a`` and ``b`` holds the same values."""
    ra, rb = open_run(a), open_run(b)
    assert ra.ranks == rb.ranks
    for name in ROUND_TRIP_TABLES:
        x, y = ra.table(name), rb.table(name)
        assert len(x) == len(y), name
        if not len(x):
            continue
        key = [c for c in ("rank", "start_ns", "dur_ns", "correlation", "name", "metric") if c in x.columns]
        x = x.sort_values(key, kind="stable").reset_index(drop=True)
        y = y.sort_values(key, kind="stable").reset_index(drop=True)
        for col in x.columns:
            xs = x[col].astype(object).where(x[col].notna(), None).tolist()
            ys = y[col].astype(object).where(y[col].notna(), None).tolist()
            assert xs == ys, f"{name}.{col} differs"


@pytest.fixture
def ddp_run(tmp_path: Path) -> Path:
    run = tmp_path / "ddp.perfscope"
    import_kineto(DDP, run)
    return run


# -- import -----------------------------------------------------------------------------
def test_import_two_ranks_then_info_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    code, out, err = cli(capsys, "import", "kineto", *map(str, DDP), "-o", str(run))
    assert code == 0, err
    assert "2 ranks" in out and "152 kernels" in out
    assert f"perfscope analyze {run}" in out
    assert err == ""  # both files carry distributedInfo: nothing to warn about

    code, out, err = cli(capsys, "info", str(run), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["status"] == "complete" and doc["source"] == "import:kineto"
    assert doc["world_size"] == 2
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["ranks"][1]["gpu"]["name"] == "NVIDIA H100 80GB HBM3" and doc["ranks"][1]["gpu"]["index"] == 1
    assert doc["ranks"][0]["pid"] == 41230
    assert doc["tables"] == {**{name: 0 for name in doc["tables"]}, "kernels": 152, "memcpy": 12, "memset": 6, "sync": 18,
                             "api": 188, "markers": 38, "steps": 6, "collectives": 14, "operators": 176}


def test_fixture_contents(ddp_run: Path) -> None:
    run = open_run(ddp_run)
    steps = run.table("steps")
    assert steps["name"].tolist() == ["ProfilerStep#10", "ProfilerStep#11", "ProfilerStep#12"] * 2
    # Each step encloses the launches made during it.
    api = run.table("api")
    for _, s in steps.iterrows():
        inside = api[(api["rank"] == s["rank"]) & (api["start_ns"] >= s["start_ns"]) & (api["start_ns"] < s["start_ns"] + s["dur_ns"])]
        assert len(inside) > 20
    memcpy = run.table("memcpy")
    assert set(memcpy["src_kind"]) == {"pageable", "pinned"} and set(memcpy["copy_kind"]) == {"H2D"}
    assert memcpy["pageable"].sum() == 6
    coll = run.table("collectives")
    assert set(coll["func"]) == {"AllReduce", "Broadcast"}
    assert coll["bytes"].notna().all() and (coll["source"] == "kineto").all()
    assert set(run.table("kernels")["stream"]) == {7, 20}
    sync = run.table("sync")
    assert set(sync["sync_kind"]) == {"stream", "stream_wait_event"}
    assert sync["tid"].notna().all()


def test_import_absolute_ns_timestamps_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "single"
    code, out, err = cli(capsys, "import", "kineto", str(SINGLE), "-o", str(run))
    assert code == 0
    assert "no distributedInfo.rank" in err and "rank 0" in err  # guessed rank: warned once
    r = open_run(run)
    assert r.table("steps")["start_ns"].tolist() == [1_733_126_405_000_000_123]
    assert set(r.table("sync")["sync_kind"]) == {"stream", "stream_wait_event", "event", "context"}
    assert r.table("collectives")["seq"].tolist() == [30, 31, 33]


def test_rank_option_sets_the_rank_of_a_single_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "import", "kineto", str(SINGLE), "-o", str(tmp_path / "r"), "--rank", "5")
    assert code == 0 and err == ""
    assert open_run(tmp_path / "r").ranks == [5]


def test_rank_option_with_several_files_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "import", "kineto", *map(str, DDP), "-o", str(tmp_path / "r"), "--rank", "1")
    assert code != 0 and err.count("\n") == 1 and "single file" in err
    assert not (tmp_path / "r").exists()


def test_files_without_distributed_info_get_ranks_in_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shutil.copy(SINGLE, a)
    shutil.copy(SINGLE, b)
    result = import_kineto([a, b], tmp_path / "r")
    assert result.ranks == [0, 1]
    assert any("a.json -> rank 0" in w and "b.json -> rank 1" in w for w in result.warnings)


def test_two_files_claiming_one_rank_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "import", "kineto", str(DDP[0]), str(DDP[0]), "-o", str(tmp_path / "r"))
    assert code != 0 and "both rank 0" in err
    assert not (tmp_path / "r").exists()


# -- errors leave nothing behind and never touch an existing run --------------------------
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", ', "not valid JSON"),
        (b'{"hello": "world"}', "not a Kineto trace"),
        (None, "no such file"),
    ],
)
def test_bad_input_is_one_line_and_leaves_the_existing_run_untouched(
    tmp_path: Path, ddp_run: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    before = snapshot(ddp_run)
    code, out, err = cli(capsys, "import", "kineto", str(bad), "-o", str(ddp_run), "--force")
    assert code != 0
    assert err.startswith("perfscope: error: ") and err.count("\n") == 1 and message in err
    assert snapshot(ddp_run) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary run left


def test_existing_output_needs_force(tmp_path: Path, ddp_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(ddp_run)
    code, out, err = cli(capsys, "import", "kineto", str(SINGLE), "-o", str(ddp_run))
    assert code != 0 and err.count("\n") == 1 and "--force" in err
    assert snapshot(ddp_run) == before
    code, out, err = cli(capsys, "import", "kineto", str(SINGLE), "-o", str(ddp_run), "--force")
    assert code == 0
    assert open_run(ddp_run).ranks == [0] and open_run(ddp_run).row_counts()["kernels"] == 26


def test_info_and_export_errors(tmp_path: Path, ddp_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    for argv in (["info", str(tmp_path / "empty"), "--json"], ["export", "chrome", str(tmp_path / "empty"), "-o", str(tmp_path / "t.json")]):
        code, _, err = cli(capsys, *argv)
        assert code != 0 and err.count("\n") == 1 and "not a perfscope run" in err

    # A truncated part file.
    part = next((ddp_run / "kernels" / "rank=0").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:100])
    for argv in (["info", str(ddp_run), "--json"], ["export", "chrome", str(ddp_run), "-o", str(tmp_path / "t.json")]):
        code, _, err = cli(capsys, *argv)
        assert code != 0 and err.count("\n") == 1 and "part file" in err
    assert not (tmp_path / "t.json").exists()

    # A newer schema version.
    meta = json.loads((ddp_run / "run.json").read_text())
    meta["schema_version"] = 99
    (ddp_run / "run.json").write_text(json.dumps(meta))
    for argv in (["info", str(ddp_run)], ["export", "chrome", str(ddp_run), "-o", str(tmp_path / "t.json")]):
        code, _, err = cli(capsys, *argv)
        assert code != 0 and err.count("\n") == 1 and "upgrade perfscope" in err


# -- export -----------------------------------------------------------------------------
def test_export_layout(tmp_path: Path, ddp_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.json"
    code, text, err = cli(capsys, "export", "chrome", str(ddp_run), "-o", str(out))
    assert code == 0, err
    assert "ui.perfetto.dev" in text
    text = out.read_text()
    doc = json.loads(text)
    # Kineto's keys come before the events, with Kineto's spacing (HTA greps '"rank":\s+N').
    assert re.search(r'"rank":\s+0', text[: text.index('"traceEvents"')])
    assert doc["baseTimeNanoseconds"] % 1_000_000_000 == 0
    assert doc["distributedInfo"]["world_size"] == 2
    assert doc["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"rank 0 GPU 0", "rank 1 GPU 1"} <= names and any(n.startswith("rank 1 host") for n in names)
    # GPU annotations carry no "stream" arg (HTA would count them as kernels), as in Kineto.
    assert all("stream" not in e["args"] for e in events if e.get("cat") == "gpu_user_annotation")
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == 152 and all(e["tid"] == e["args"]["stream"] for e in kernels)
    assert {e["cat"] for e in events if e["ph"] == "X"} >= {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "cuda_runtime",
                                                             "user_annotation", "gpu_user_annotation", "perfscope_collective"}
    lanes = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"steps", "collectives", "stream 7", "stream 20"} <= lanes

    # Existing output needs --force; --rank selects.
    code, _, err = cli(capsys, "export", "chrome", str(ddp_run), "-o", str(out), "--rank", "1")
    assert code != 0 and "--force" in err
    code, _, err = cli(capsys, "export", "chrome", str(ddp_run), "-o", str(out), "--rank", "1", "--force")
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["distributedInfo"]["rank"] == 1
    assert [r["rank"] for r in doc["perfscope"]["ranks"]] == [1]
    code, _, err = cli(capsys, "export", "chrome", str(ddp_run), "-o", str(tmp_path / "x.json"), "--rank", "7")
    assert code != 0 and "not in" in err


def test_round_trip_fixture(tmp_path: Path, ddp_run: Path) -> None:
    """import -> export -> import gives the same tables (both ranks in one file, gzipped)."""
    export_chrome(ddp_run, tmp_path / "t.json.gz")
    import_kineto(tmp_path / "t.json.gz", tmp_path / "again")
    assert_same_tables(ddp_run, tmp_path / "again")
    # A second lap is stable too.
    export_chrome(tmp_path / "again", tmp_path / "t2.json")
    import_kineto(tmp_path / "t2.json", tmp_path / "third")
    assert_same_tables(ddp_run, tmp_path / "third")


def test_round_trip_keeps_tables_kineto_has_no_category_for(tmp_path: Path, ddp_run: Path) -> None:
    """host spans, metrics and nccl_plugin collectives (no kernel) survive a round trip."""
    from perfscope.store import write_rank_tables

    write_rank_tables(ddp_run, 0, {
        "host": pd.DataFrame({"start_ns": [1_733_126_402_000_100_000], "dur_ns": [5_000], "tid": [41230],
                              "kind": ["dataloader_wait"], "name": ["next(batch)"]}),
        "metrics": pd.DataFrame({"ts_ns": [1_733_126_402_000_000_001, 1_733_126_402_100_000_000], "device": [0, 0],
                                 "metric": ["sm_util_pct", "power_w"], "value": [87.5, 612.25]}),
    })
    export_chrome(ddp_run, tmp_path / "t.json")
    import_kineto(tmp_path / "t.json", tmp_path / "again")
    assert_same_tables(ddp_run, tmp_path / "again")


# -- shared real traces -----------------------------------------------------------------
SHARED_NAMES = [
    "critical_path_alexnet_bench.json.gz", "nccl_parser_config_nccl_data.json.gz", "ns_resolution_trace_rank-0.json.gz",
    "trace_compare_base_base.json.gz", "trace_compare_test_test.json.gz", "trace_filter_sampled_rank-0.json.gz",
    "trace_filter_sampled_rank-1.json.gz",
]


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_shared_trace_imports_every_kernel(shared_kineto: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    trace = shared_kineto / name
    if not trace.is_file():
        pytest.skip(f"{name} not in {shared_kineto}")
    code, out, err = cli(capsys, "import", "kineto", str(trace), "-o", str(tmp_path / "run"))
    assert code == 0, err
    counts = open_run(tmp_path / "run").row_counts()
    assert counts["kernels"] == kernel_events(trace)
    code, out, err = cli(capsys, "info", str(tmp_path / "run"), "--json")
    assert json.loads(out)["tables"]["kernels"] == counts["kernels"]


def test_shared_trace_details(shared_kineto: Path, tmp_path: Path) -> None:
    nccl = shared_kineto / "nccl_parser_config_nccl_data.json.gz"
    ns = shared_kineto / "ns_resolution_trace_rank-0.json.gz"
    if not (nccl.is_file() and ns.is_file()):
        pytest.skip("shared traces incomplete")
    import_kineto(nccl, tmp_path / "nccl")
    run = open_run(tmp_path / "nccl")
    coll = run.table("collectives")
    assert len(coll) == 21 and set(coll["func"]) == {"AllReduce", "Broadcast"}
    assert (coll["comm_id"] == "0").all() and (coll["nranks"] == 2).all()
    first = coll.sort_values("start_ns").iloc[0]
    assert first["bytes"] == first["count"] * (4 if first["datatype"] == "Float" else 1)
    # baseTimeNanoseconds + "4458676522690.655" us, to the nanosecond.
    assert run.table("steps")["start_ns"].min() > 1_711_964_646_000_000_000
    assert run.meta["world_size"] == 2 and run.rank_meta(0)["gpu"]["name"] == "NVIDIA A100-PG509-200"

    import_kineto(ns, tmp_path / "ns")
    raw = gzip.decompress(ns.read_bytes())
    doc = json.loads(raw)
    first_kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    text = raw.decode()
    # The kernel's ts as written in the file (text), converted by hand.
    ts_text = text[text.index('"ts": ', text.index(json.dumps(first_kernel["name"])[1:-1])) + 6:].split(",", 1)[0]
    whole, _, frac = ts_text.partition(".")
    expected = int(whole) * 1000 + int((frac + "000")[:3])
    kernels = open_run(tmp_path / "ns").table("kernels")
    assert expected in set(kernels["start_ns"])


def test_round_trip_shared_trace(shared_kineto: Path, tmp_path: Path) -> None:
    trace = shared_kineto / "nccl_parser_config_nccl_data.json.gz"
    if not trace.is_file():
        pytest.skip(f"{trace.name} not present")
    import_kineto(trace, tmp_path / "a")
    export_chrome(tmp_path / "a", tmp_path / "t.json")
    import_kineto(tmp_path / "t.json", tmp_path / "b")
    assert_same_tables(tmp_path / "a", tmp_path / "b")


def test_round_trip_two_shared_ranks(shared_kineto: Path, tmp_path: Path) -> None:
    files = [shared_kineto / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
    if not all(f.is_file() for f in files):
        pytest.skip("trace_filter_sampled traces not present")
    result = import_kineto(files, tmp_path / "a")
    assert result.ranks == [0, 1]
    export_chrome(tmp_path / "a", tmp_path / "t.json")
    import_kineto(tmp_path / "t.json", tmp_path / "b")
    assert_same_tables(tmp_path / "a", tmp_path / "b")



def test_progress_bar_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Big inputs on a TTY get a rich progress bar on stderr; the summary stays on stdout."""
    import sys

    import perfscope.cli.import_cmd as import_cmd

    calls: list[tuple[str, int, int]] = []
    real = import_cmd.import_kineto

    def spy(*args: object, **kwargs: object) -> object:
        progress = kwargs["progress"]
        assert progress is not None

        def record(message: str, done: int, total: int) -> None:
            calls.append((message, done, total))
            progress(message, done, total)  # type: ignore[operator]

        kwargs["progress"] = record
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(import_cmd, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setattr(import_cmd, "import_kineto", spy)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    code, out, err = cli(capsys, "import", "kineto", *map(str, DDP), "-o", str(tmp_path / "r"))
    assert code == 0 and "Imported 2 file(s)" in out
    assert calls and calls[-1][1] == calls[-1][2]  # ends at 100 %
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)  # never goes backwards


def test_unwritable_output_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _, err = cli(capsys, "import", "kineto", str(SINGLE), "-o", str(blocker / "run"))
    assert code != 0 and err.count("\n") == 1 and "cannot write" in err
    run = tmp_path / "run"
    import_kineto(SINGLE, run)
    code, _, err = cli(capsys, "export", "chrome", str(run), "-o", str(blocker / "t.json"))
    assert code != 0 and err.count("\n") == 1 and "cannot write" in err


def test_empty_trace_imports_as_an_empty_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 4}, "traceEvents": []}))
    code, out, err = cli(capsys, "import", "kineto", str(empty), "-o", str(tmp_path / "e"))
    assert code == 0 and "rank 3" in out and "0 kernels" in out
    code, out, _ = cli(capsys, "info", str(tmp_path / "e"), "--json")
    doc = json.loads(out)
    assert doc["world_size"] == 4 and doc["ranks"][0]["rank"] == 3 and doc["tables"]["kernels"] == 0
    code, _, err = cli(capsys, "export", "chrome", str(tmp_path / "e"), "-o", str(tmp_path / "e.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "e.json").read_text())["traceEvents"] == []


@pytest.mark.parametrize("trace", [*DDP, SINGLE], ids=lambda p: p.name)
def test_chunked_and_whole_decoding_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trace: Path) -> None:
    """Small files decode in one pass, big ones chunk by chunk: both give the same tables."""
    from perfscope.store.kineto import decode

    import_kineto(trace, tmp_path / "whole")
    monkeypatch.setattr(decode, "WHOLE_DECODE_BYTES", 0)
    monkeypatch.setattr(decode, "CHUNK_EVENTS", 50)
    monkeypatch.setattr(decode.iter_event_chunks, "__kwdefaults__", {"path": "trace", "chunk": 50})
    import_kineto(trace, tmp_path / "chunked")
    assert_same_tables(tmp_path / "whole", tmp_path / "chunked")


def test_chunked_and_whole_decoding_agree_on_a_shared_trace(shared_kineto: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfscope.store.kineto import decode

    trace = shared_kineto / "ns_resolution_trace_rank-0.json.gz"  # epoch µs with ns decimals
    if not trace.is_file():
        pytest.skip(f"{trace.name} not present")
    import_kineto(trace, tmp_path / "whole")
    monkeypatch.setattr(decode, "WHOLE_DECODE_BYTES", 0)
    import_kineto(trace, tmp_path / "chunked")
    assert_same_tables(tmp_path / "whole", tmp_path / "chunked")
