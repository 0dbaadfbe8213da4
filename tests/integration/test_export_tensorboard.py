"""`perfscope export tensorboard`, checked with TensorBoard's PyTorch profiler plugin itself.

The plugin's own ``RunLoader`` (torch-tb-profiler, the test extra) reads the exported log
directory in this process: its worker processes become threads and its file cache a
pass-through (both only move local files around), so the parsing and every view it builds
are the plugin's code.
"""
from __future__ import annotations

import gzip
import itertools
import json
import queue
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from perfscope.cli.main import main
from perfscope.errors import RunExistsError, UsageError
from perfscope.store import create_run, open_run, write_rank_meta, write_rank_tables
from perfscope.store.kineto import import_kineto
from perfscope.store.tensorboard import export_tensorboard, host_devices, worker_names

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"
COMM = H200 / "comm_heavy.perfscope"
DATALOADER = H200 / "slow_dataloader.perfscope"

pytest.importorskip("tensorboard", reason="pip install -e '.[test]' (tensorboard, torch-tb-profiler)")
pytestmark = pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")  # inside the plugin
loader = pytest.importorskip("torch_tb_profiler.profiler.loader", reason="pip install -e '.[test]' (torch-tb-profiler)")


class _ThreadProcess:
    """What the loader needs of ``multiprocessing.Process``, on a thread."""

    def __init__(self, target: Any, args: tuple[Any, ...]) -> None:
        self._thread = threading.Thread(target=target, args=args, daemon=True)

    def start(self) -> None:
        self._thread.start()


class _LocalCache:
    """The plugin's ``io.Cache`` for local files: every file is its own cached copy."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = str(cache_dir)

    def get_remote_cache(self, filename: str) -> str:
        return filename

    def add_file(self, source: str, local: str) -> None:
        pass


def load_with_plugin(run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The plugin's ``Run`` for the traces in ``run_dir`` (what TensorBoard would show)."""
    monkeypatch.setattr(loader, "Process", _ThreadProcess)
    monkeypatch.setattr(loader, "Queue", queue.Queue)
    return loader.RunLoader(run_dir.name, str(run_dir), _LocalCache(tmp_path)).load()


def _performance(profile: Any) -> dict[str, float]:
    """The overview's average step time parts (name -> us)."""
    return {c["name"]: c["value"] for c in profile.overview["performance"][0]["children"]}


def test_two_rank_nccl_run_opens_in_the_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = export_tensorboard(COMM, tmp_path / "logs")
    assert result.run_dir == tmp_path / "logs" / "plugins" / "profile" / "comm_heavy"
    assert sorted(result.files) == ["vm_651", "vm_652"] and result.ranks == [0, 1]

    run = load_with_plugin(result.run_dir, tmp_path, monkeypatch)
    views = {v.name for v in run.views}
    assert {"overall", "operator", "kernel", "trace", "distributed"} <= views
    assert run.workers == ["All", "vm_651", "vm_652"]

    stored = open_run(COMM)
    for rank, worker in enumerate(["vm_651", "vm_652"]):
        profile = run.get_profile(worker, "default")
        steps = stored.table("steps", ranks=[rank])
        assert [row[0] for row in profile.overview["steps"]["rows"]] == [str(s) for s in steps["step"]]
        assert _performance(profile)["Kernel"] > 0 and _performance(profile)["Runtime"] > 0
        # The kernel view counts exactly the rank's kernels, by name.
        kernels = stored.table("kernels", ranks=[rank])
        table = {row[0]: row[2] for row in profile.kernel_table["data"]["rows"]}
        assert table == dict(Counter(kernels["name"].astype(str)))
        ops = {row["name"] for row in profile.operation_table_by_name["data"]}
        assert {"SGD", "all_reduce"} <= ops  # host spans (optimizer step, collective wait)

    # Distributed view: both ranks' all-reduces, with their sizes, and their GPUs.
    dist = run.get_profile("All", "default")
    colls = stored.table("collectives")
    for rank, worker in enumerate(["vm_651", "vm_652"]):
        rows = {r[0]: r for r in dist.comm_ops["data"][worker]["rows"]}
        mine = colls[colls["rank"] == rank]
        assert rows["nccl:all_reduce"][1] == len(mine)
        assert rows["nccl:all_reduce"][2] == int(mine["bytes"].sum())
    gpus = dist.gpu_info["data"]["vm"]
    assert set(gpus) == {"Process 651", "Process 652"}
    assert gpus["Process 651"]["GPU0"]["Name"] == "NVIDIA H200"
    assert gpus["Process 651"]["GPU0"]["Compute Capability"] == "9.0"


def test_data_loader_waits_show_as_data_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = export_tensorboard(DATALOADER, tmp_path / "logs", run_name="dl")
    run = load_with_plugin(result.run_dir, tmp_path, monkeypatch)
    (worker,) = [w for w in run.workers if w != "All"]
    perf = _performance(run.get_profile(worker, "default"))
    # The run waits on its loader most of each step; the plugin's overview says so.
    assert perf["DataLoader"] > 0.5 * sum(perf.values())


def test_trace_files_use_the_plugins_spellings(tmp_path: Path) -> None:
    result = export_tensorboard(COMM, tmp_path, ranks=[1])
    (path,) = result.files.values()
    assert path.name == "vm_652.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert doc["distributedInfo"] == {"rank": 1, "world_size": 2}
    assert doc["deviceProperties"][0]["totalGlobalMem"] == 150109880320
    cats = Counter(e.get("cat") for e in doc["traceEvents"] if e["ph"] == "X")
    assert cats["Runtime"] > 0 and cats["cuda_runtime"] == 0 and cats["kernel"] > 0
    steps = [e for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 7
    ends = sorted((e["ts"], e["ts"] + e["dur"]) for e in steps)
    assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(ends))  # back to back, never overlapping
    comm = [e for e in doc["traceEvents"] if e["name"] == "nccl:all_reduce"]
    assert len(comm) == 16 and len({e["args"]["External id"] for e in comm}) == 16


def test_worker_names_and_devices_fall_back(tmp_path: Path) -> None:
    run = open_run(COMM)
    assert worker_names(run, [0, 1]) == {0: "vm_651", 1: "vm_652"}
    assert [d["name"] for d in host_devices(run, 0)] == ["NVIDIA H200"]
    # Two ranks claiming one host and pid; GPUs 1 and 3 of one host: the plugin finds a GPU by index.
    create_run(tmp_path / "r", command=["x"], source="test", world_size=2)
    write_rank_meta(tmp_path / "r", 0, {"host": "n1", "pid": 7, "gpu": {"index": 3, "name": "B", "capability": "9.0"}})
    write_rank_meta(tmp_path / "r", 1, {"host": "n1", "pid": 7, "gpu": {"index": 1, "name": "A"}})
    for rank in (0, 1):
        write_rank_tables(tmp_path / "r", rank, {"kernels": {"start_ns": [10**18], "dur_ns": [5], "name": ["k"]}})
    bare = open_run(tmp_path / "r")
    assert worker_names(bare, [0, 1]) == {0: "rank0_7", 1: "rank1_7"}
    props = host_devices(bare, 0)
    assert [p.get("name") for p in props] == [None, "A", None, "B"] and props[3]["computeMajor"] == 9


def test_existing_traces_need_force_and_bad_input_is_refused(tmp_path: Path) -> None:
    export_tensorboard(COMM, tmp_path, ranks=[0, 1])
    with pytest.raises(RunExistsError, match="--force"):
        export_tensorboard(COMM, tmp_path)
    # --force replaces: a one-rank export leaves no stale worker behind.
    result = export_tensorboard(COMM, tmp_path, ranks=[0], force=True)
    assert sorted(p.name for p in result.run_dir.iterdir()) == ["vm_651.pt.trace.json.gz"]
    with pytest.raises(UsageError, match="not in"):
        export_tensorboard(COMM, tmp_path / "x", ranks=[5])
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a file"):
        export_tensorboard(COMM, tmp_path / "file")


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["export", "tensorboard", str(COMM), "-o", str(tmp_path), "--name", "exp1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "2 worker trace(s)" in out and f"tensorboard --logdir {tmp_path}" in out
    assert (tmp_path / "plugins" / "profile" / "exp1" / "vm_651.pt.trace.json.gz").is_file()
    code = main(["export", "tensorboard", str(COMM), "-o", str(tmp_path), "--name", "exp1"])
    assert code != 0 and "--force" in capsys.readouterr().err


def test_imported_kineto_run_opens_with_rank_worker_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An imported trace knows its pids but not its host: workers are named by rank."""
    kineto = Path(__file__).resolve().parents[1] / "data" / "kineto"
    import_kineto([kineto / "ddp_rank0.json.gz", kineto / "ddp_rank1.json.gz"], tmp_path / "ddp")
    stored = open_run(tmp_path / "ddp")
    result = export_tensorboard(stored, tmp_path / "logs")
    pids = [stored.rank_meta(r)["pid"] for r in stored.ranks]
    assert sorted(result.files) == [f"rank{r}_{pid}" for r, pid in zip(stored.ranks, pids, strict=True)]
    run = load_with_plugin(result.run_dir, tmp_path, monkeypatch)
    for rank, worker in zip(stored.ranks, sorted(result.files), strict=True):
        profile = run.get_profile(worker, "default")
        steps = stored.table("steps", ranks=[rank])["step"]
        assert [row[0] for row in profile.overview["steps"]["rows"]] == [str(s) for s in steps]
        assert sum(row[2] for row in profile.kernel_table["data"]["rows"]) == len(stored.table("kernels", ranks=[rank]))
