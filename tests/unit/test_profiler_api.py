"""perfscope.profile / Profiler / annotate in-process (CPU only)."""
from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import perfscope
from perfscope.errors import AlreadyProfilingError, RunExistsError, UsageError
from perfscope.profiler import PerfscopeWarning, active_profiler

torch = pytest.importorskip("torch")
from torch.utils.data import dataloader as _dl  # noqa: E402

CPU_ONLY: dict[str, Any] = {"cupti": False, "nccl": False, "nvml": False}


def _hooks_state() -> tuple[Any, ...]:
    import torch.distributed as dist
    from torch.optim import optimizer as optim_mod

    return (
        _dl._BaseDataLoaderIter.__dict__["__next__"],
        _dl.DataLoader.__dict__["__iter__"],
        getattr(dist, "all_reduce", None),
        getattr(dist, "barrier", None),
        torch.cuda.synchronize,
        len(optim_mod._global_optimizer_pre_hooks),
        len(optim_mod._global_optimizer_post_hooks),
    )


@pytest.fixture(autouse=True)
def no_profiler_left_behind() -> Iterator[None]:
    """Every test must leave no profiler running and every torch hook removed."""
    before = _hooks_state()
    yield
    assert active_profiler() is None
    assert _hooks_state() == before


def _train(n: int, prof: Any = None, delay_s: float = 0.0) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(n):
        if delay_s:
            time.sleep(delay_s)
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if prof is not None:
            prof.step()


def test_context_manager_writes_a_complete_run_with_explicit_steps(tmp_path: Path) -> None:
    with perfscope.profile(tmp_path / "run", **CPU_ONLY) as prof:
        _train(5, prof)
    run = perfscope.open_run(tmp_path / "run")
    assert run.status == "complete"
    assert run.meta["source"] == "profile" and run.meta["world_size"] == 1
    steps = run.table("steps")
    assert steps["step"].tolist() == [0, 1, 2, 3, 4]
    assert set(steps["source"]) == {"explicit"}
    assert (steps["dur_ns"] > 0).all()
    host = run.table("host")
    assert (host["kind"] == "optimizer_step").sum() == 5
    meta = run.rank_meta(0)
    assert meta["status"] == "complete" and meta["steps_source"] == "explicit"
    assert meta["versions"]["torch"] == torch.__version__ and meta["versions"]["python"]
    assert meta["pid"] and meta["host"] and meta["local_rank"] == 0


def test_decorator_and_bare_decorator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    @perfscope.profile(tmp_path / "deco", **CPU_ONLY)
    def main(n: int) -> int:
        _train(n)
        return n

    assert main(3) == 3
    assert perfscope.open_run(tmp_path / "deco").status == "complete"
    # A second call records again into the same directory: refused without overwrite.
    with pytest.raises(RunExistsError):
        main(1)

    monkeypatch.chdir(tmp_path)

    @perfscope.profile
    def bare() -> str:
        return "ok"

    with warnings.catch_warnings():  # bare: default options, so CUPTI may warn that no GPU is here
        warnings.simplefilter("ignore", PerfscopeWarning)
        assert bare() == "ok"
    runs = list(tmp_path.glob("perfscope-*.perfscope"))
    assert len(runs) == 1 and perfscope.open_run(runs[0]).status == "complete"


def test_start_stop_returns_the_run(tmp_path: Path) -> None:
    prof = perfscope.profile(tmp_path / "ss", **CPU_ONLY)
    assert prof.start() is prof and prof.running
    _train(2, prof)
    run = prof.stop()
    assert not prof.running
    assert run.row_counts()["steps"] == 2
    assert prof.stop() is None  # idempotent


def test_double_start_names_the_mistake(tmp_path: Path) -> None:
    prof = perfscope.profile(tmp_path / "a", **CPU_ONLY).start()
    try:
        with pytest.raises(AlreadyProfilingError, match="start\\(\\) was called twice"):
            prof.start()
        with pytest.raises(AlreadyProfilingError, match="only one profile\\(\\) can record"):
            with perfscope.profile(tmp_path / "b", **CPU_ONLY):
                pass
    finally:
        prof.stop()
    with pytest.raises(UsageError, match="create a new one"):
        prof.start()


def test_exception_in_the_block_removes_hooks_and_keeps_the_data(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="boom"):
        with perfscope.profile(tmp_path / "exc", **CPU_ONLY) as prof:
            _train(2, prof)
            raise ValueError("boom")
    run = perfscope.open_run(tmp_path / "exc")
    assert run.row_counts()["steps"] == 2
    assert run.rank_meta(0)["error"] == "ValueError: boom"


def test_failed_start_removes_everything(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "something.txt").write_text("x")
    with pytest.raises(RunExistsError):
        perfscope.profile(tmp_path / "busy", **CPU_ONLY).start()
    # the autouse fixture checks nothing is left installed or active


def test_step_outside_recording_is_a_usage_error(tmp_path: Path) -> None:
    prof = perfscope.profile(tmp_path / "x", **CPU_ONLY)
    with pytest.raises(UsageError, match="not recording"):
        prof.step()


def test_schedule_records_only_the_window(tmp_path: Path) -> None:
    with perfscope.profile(tmp_path / "sched", schedule=(2, 3), **CPU_ONLY) as prof:
        for i in range(8):
            with perfscope.annotate(f"iter{i}"):
                _train(1)
            prof.step()
    run = perfscope.open_run(tmp_path / "sched")
    assert run.table("steps")["step"].tolist() == [2, 3, 4]
    names = run.table("markers")["name"].astype(str).tolist()
    assert names == ["iter2", "iter3", "iter4"]
    assert (run.table("host")["kind"] == "optimizer_step").sum() == 3
    assert run.rank_meta(0)["schedule"] == {"skip": 2, "record": 3}


def test_annotate_rows_context_manager_decorator_and_bare(tmp_path: Path) -> None:
    @perfscope.annotate("decorated")
    def f() -> int:
        time.sleep(0.002)
        return 1

    @perfscope.annotate
    def g() -> int:
        return 2

    with perfscope.annotate("outside"):  # no profiler: only an NVTX range, no error
        pass
    with perfscope.profile(tmp_path / "ann", **CPU_ONLY):
        with perfscope.annotate("outer"):
            with perfscope.annotate("inner"):
                time.sleep(0.002)
        assert f() == 1 and g() == 2
    markers = perfscope.open_run(tmp_path / "ann").table("markers")
    by_name = {str(r.name): r for r in markers.itertuples()}
    assert set(by_name) == {"outer", "inner", "decorated", "test_annotate_rows_context_manager_decorator_and_bare.<locals>.g"}
    assert set(markers["source"].astype(str)) == {"perfscope"}
    outer, inner = by_name["outer"], by_name["inner"]
    assert outer.start_ns <= inner.start_ns and inner.start_ns + inner.dur_ns <= outer.start_ns + outer.dur_ns
    assert inner.dur_ns >= 2_000_000 and by_name["decorated"].dur_ns >= 2_000_000


def test_annotate_rejects_non_strings() -> None:
    with pytest.raises(UsageError):
        perfscope.annotate(3)  # type: ignore[arg-type]


def test_optimizer_steps_become_steps_without_explicit_calls(tmp_path: Path) -> None:
    with perfscope.profile(tmp_path / "auto", **CPU_ONLY):
        _train(4, delay_s=0.005)
    run = perfscope.open_run(tmp_path / "auto")
    steps = run.table("steps")
    assert steps["step"].tolist() == [0, 1, 2, 3]
    assert set(steps["source"]) == {"optimizer"}
    assert (steps["dur_ns"].iloc[1:] >= 5_000_000).all()
    assert run.rank_meta(0)["steps_source"] == "optimizer"


def test_no_gpu_gives_one_clear_warning_and_a_valid_run(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.warns(PerfscopeWarning, match="no NVIDIA GPU found"):
        with perfscope.profile(tmp_path / "nogpu", nccl=False) as prof:
            _train(2, prof)
    run = perfscope.open_run(tmp_path / "nogpu")
    assert run.status == "complete"
    assert any("no NVIDIA GPU found" in w for w in run.rank_meta(0)["warnings"])
    assert run.row_counts()["steps"] == 2


def test_periodic_flush_reaches_disk_while_running(tmp_path: Path) -> None:
    with perfscope.profile(tmp_path / "fl", flush_interval_s=0.05, **CPU_ONLY) as prof:
        _train(3, prof)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not list((tmp_path / "fl" / "steps").glob("rank=0/part-*.parquet")):
            time.sleep(0.02)
        mid = perfscope.open_run(tmp_path / "fl")
        assert mid.status == "recording"
        assert mid.row_counts()["steps"] == 3


def test_overwrite_replaces_a_run(tmp_path: Path) -> None:
    with perfscope.profile(tmp_path / "ow", **CPU_ONLY) as prof:
        _train(3, prof)
    with perfscope.profile(tmp_path / "ow", overwrite=True, **CPU_ONLY) as prof:
        _train(1, prof)
    assert perfscope.open_run(tmp_path / "ow").row_counts()["steps"] == 1


def test_nccl_plugin_variables_are_set_while_recording_and_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    nccl = pytest.importorskip("perfscope.collectors.nccl")
    try:
        nccl.plugin_path()
    except Exception:  # noqa: BLE001
        pytest.skip("NCCL plugin not built here")
    monkeypatch.delenv("NCCL_PROFILER_PLUGIN", raising=False)
    with perfscope.profile(tmp_path / "nccl", cupti=False, nvml=False):
        assert os.environ["NCCL_PROFILER_PLUGIN"] == str(nccl.plugin_path())
    assert "NCCL_PROFILER_PLUGIN" not in os.environ
    assert "nccl" in perfscope.open_run(tmp_path / "nccl").rank_meta(0)["collectors"]


def test_users_own_nccl_plugin_is_kept_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    pytest.importorskip("perfscope.collectors.nccl")
    monkeypatch.setenv("NCCL_PROFILER_PLUGIN", "/opt/their/libprofiler.so")
    with pytest.warns(PerfscopeWarning, match="NCCL_PROFILER_PLUGIN"):
        with perfscope.profile(tmp_path / "theirs", cupti=False, nvml=False):
            assert os.environ["NCCL_PROFILER_PLUGIN"] == "/opt/their/libprofiler.so"
    assert "nccl" not in perfscope.open_run(tmp_path / "theirs").rank_meta(0)["collectors"]


def test_relative_path_survives_a_chdir_after_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Hydra and others chdir once the program runs: the run must stay where it was started.
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    prof = perfscope.profile("rel.perfscope", **CPU_ONLY).start()
    monkeypatch.chdir(tmp_path / "elsewhere")
    _train(3, prof)
    prof.flush()
    run = prof.stop()
    assert run.status == "complete" and run.row_counts()["steps"] == 3
    assert perfscope.open_run(tmp_path / "rel.perfscope").row_counts()["steps"] == 3
    assert not (tmp_path / "elsewhere" / "rel.perfscope").exists()


def test_ranks_on_different_nodes_of_an_srun_job_derive_one_run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without torchrun, each node's ranks have their own parent (slurmstepd, orted): the
    # run id must not depend on it, or the other nodes' ranks wait for a run that never comes.
    import os

    from perfscope.recorder.runs import job_run_id

    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    ids = set()
    for ppid in (100, 200):
        monkeypatch.setattr(os, "getppid", lambda ppid=ppid: ppid)
        ids.add(job_run_id(tmp_path / "run"))
    assert len(ids) == 1


def test_nvtx_injection_variable_is_removed_on_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Processes the program starts after stop() must not load CUPTI as their NVTX injection.
    import os
    import types

    from perfscope.collectors.cupti import recording

    class FakeCollector:
        clock_offset_ns = 0

        def __init__(self, writer: Any, **_kw: Any) -> None:
            pass

        def start(self) -> None:
            pass

        def flush(self) -> None:
            pass

        def stop(self) -> dict[str, Any]:
            return {}

    fake = types.SimpleNamespace(
        available=lambda: (True, ""), CuptiCollector=FakeCollector,
        nvtx_injection_env=lambda: {"NVTX_INJECTION64_PATH": "/opt/fake/libcupti.so"},
    )
    monkeypatch.setattr(recording, "cupti", fake)
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    prof = perfscope.profile(tmp_path / "nvtx", cupti=True, nccl=False, nvml=False).start()
    assert os.environ["NVTX_INJECTION64_PATH"] == "/opt/fake/libcupti.so"
    prof.stop()
    assert "NVTX_INJECTION64_PATH" not in os.environ


def test_warnings_as_errors_never_escape_from_a_hook(tmp_path: Path) -> None:
    # The schedule's window opens inside opt.step() (optimizer steps, no prof.step()); a
    # collector's note there must not raise into the training loop under `-W error`.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with perfscope.profile(tmp_path / "werr", schedule=(2, None), cupti=True, nccl=False, nvml=False) as prof:
            _train(4)
    assert prof.warnings  # e.g. no GPU here: still said in the rank file
