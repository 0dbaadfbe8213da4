"""The Collector protocol and registry: the recorder drives any registered collector alike."""
from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

import pytest

import perfscope
from perfscope.collectors import registry
from perfscope.collectors.base import CollectorContext, CollectorOptions, CollectorSpec, CollectorStats
from perfscope.options import RecordOptions
from perfscope.profiler import PerfscopeWarning

CPU_ONLY = {"cupti": False, "nccl": False, "nvml": False}
EVENTS: list[tuple[str, object]] = []


class ToyCollector:
    """Counts its flushes and reports them, with a made-up drop count, when it stops."""

    def __init__(self) -> None:
        self.ctx: CollectorContext | None = None
        self.flushes = 0

    def start(self, ctx: CollectorContext) -> bool:
        self.ctx = ctx
        EVENTS.append(("start", ctx))
        return True

    def flush(self) -> None:
        self.flushes += 1
        EVENTS.append(("flush", None))

    def stop(self) -> CollectorStats:
        EVENTS.append(("stop", None))
        return CollectorStats(dropped={"toy": 3}, details={"toy": {"flushes": self.flushes}})


class UnavailableCollector:
    """Cannot run here and says why."""

    def start(self, ctx: CollectorContext) -> bool:
        ctx.note("toy hardware not found: no toy events")
        return False

    def flush(self) -> None:
        raise AssertionError("never started, never flushed")

    def stop(self) -> CollectorStats:
        raise AssertionError("never started, never stopped")


class BrokenCollector(UnavailableCollector):
    def start(self, ctx: CollectorContext) -> bool:
        raise RuntimeError("toy bug")


class JobCollector:
    """A job-wide collector: sets a variable for the job, reports per rank at the end."""

    def start(self, ctx: CollectorContext) -> bool:
        self.ctx = ctx
        ctx.env["PERFSCOPE_TOY_JOB"] = "1"
        return True

    def flush(self) -> None:
        pass

    def stop(self) -> CollectorStats:
        assert self.ctx.rank is None  # the launcher acts for every rank
        return CollectorStats(by_rank={0: CollectorStats(dropped={"toy": 2}, details={"toy_job": {"ok": True}})})


def _register(monkeypatch: pytest.MonkeyPatch, *specs: CollectorSpec) -> None:
    monkeypatch.setattr(registry, "REGISTRY", (*registry.REGISTRY, *specs))
    EVENTS.clear()


def _spec(cls: type, phase: str = "window", name: str = "toy") -> CollectorSpec:
    return CollectorSpec(name, f"{__name__}:{cls.__name__}", phase, option="host_hooks")  # type: ignore[arg-type]


def test_every_registry_line_names_a_record_option_and_an_importable_collector() -> None:
    bools = {f.name for f in fields(RecordOptions) if f.type in (bool, "bool")}
    assert registry.REGISTRY
    for spec in registry.REGISTRY:
        assert spec.option in bools, spec
        assert spec.phase in ("job", "process", "window")
        made = spec.create()
        assert callable(made.start) and callable(made.flush) and callable(made.stop)
    assert {s.name for s in registry.REGISTRY} >= {"host", "nccl", "cupti", "nvml"}


def test_profiler_starts_flushes_and_stops_a_registered_collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, _spec(ToyCollector))
    with perfscope.profile(tmp_path / "toy", flush_interval_s=60, **CPU_ONLY) as prof:
        (start, ctx), = [e for e in EVENTS if e[0] == "start"]
        assert ctx.rank == 0 and ctx.run_path == (tmp_path / "toy").resolve() and ctx.writer is not None
        prof.flush()
        prof.step()
    kinds = [k for k, _ in EVENTS]
    assert kinds[0] == "start" and kinds[-1] == "stop" and "flush" in kinds
    meta = perfscope.open_run(tmp_path / "toy").rank_meta(0)
    assert meta["collectors"][-1] == "toy"
    assert meta["dropped_events"] == {"toy": 3}
    assert meta["collector_stats"]["toy"] == {"flushes": kinds.count("flush")}


def test_window_collectors_wait_for_the_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, _spec(ToyCollector, phase="window"))
    with perfscope.profile(tmp_path / "sched", schedule=(2, 1), **CPU_ONLY) as prof:
        prof.step()
        assert not EVENTS  # warm-up: not started yet
        prof.step()
        assert [k for k, _ in EVENTS] == ["start"]
        prof.step()  # the window closes after one recorded step
        assert [k for k, _ in EVENTS][-1] == "stop"
    assert perfscope.open_run(tmp_path / "sched").rank_meta(0)["collector_stats"]["toy"] == {"flushes": 0}


def test_a_collector_that_cannot_run_says_why_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register(monkeypatch, _spec(UnavailableCollector, name="absent"), _spec(BrokenCollector, name="broken"),
              CollectorSpec("missing", "perfscope.collectors.no_such_module:Nothing", "process", option="host_hooks"))
    with pytest.warns(PerfscopeWarning) as seen:
        with perfscope.profile(tmp_path / "gone", **CPU_ONLY) as prof:
            prof.step()
    texts = [str(w.message) for w in seen]
    assert "toy hardware not found: no toy events" in texts
    assert any("broken collector failed to start (RuntimeError: toy bug)" in t for t in texts)
    assert any("missing collector cannot be loaded" in t for t in texts)
    run = perfscope.open_run(tmp_path / "gone")
    assert run.status == "complete" and run.row_counts()["steps"] == 1
    meta = run.rank_meta(0)
    assert not {"absent", "broken", "missing"} & set(meta["collectors"])
    assert "toy hardware not found: no toy events" in meta["warnings"]


def test_the_launcher_runs_job_collectors_around_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfscope.launch import launch

    _register(monkeypatch, _spec(JobCollector, phase="job", name="toyjob"))
    code = "import os, sys; sys.exit(0 if os.environ.get('PERFSCOPE_TOY_JOB') == '1' else 3)"
    res = launch([sys.executable, "-c", code], tmp_path / "job", options=RecordOptions(**CPU_ONLY))
    assert res.exit_code == 0 and res.ranks == [0]
    meta = perfscope.open_run(tmp_path / "job").rank_meta(0)
    assert meta["dropped_events"]["toy"] == 2 and meta["toy_job"] == {"ok": True}


def test_the_contributing_guide_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import re
    import types

    guide = (Path(__file__).resolve().parents[2] / "CONTRIBUTING.md").read_text()
    section = guide[guide.index("## Adding a collector"):]
    module_code, registry_line = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    example = types.ModuleType("perfscope_guide_gc_pauses")
    exec(compile(module_code, "CONTRIBUTING.md", "exec"), example.__dict__)
    monkeypatch.setitem(sys.modules, example.__name__, example)
    spec = eval(registry_line.strip().rstrip(","), {"CollectorSpec": CollectorSpec})
    assert spec.option == "host_hooks" and spec.phase == "window"
    _register(monkeypatch, CollectorSpec(spec.name, f"{example.__name__}:GcPauses", spec.phase, option=spec.option))
    with perfscope.profile(tmp_path / "gc", **CPU_ONLY) as prof:
        gc.collect()
        prof.step()
    meta = perfscope.open_run(tmp_path / "gc").rank_meta(0)
    assert "gc" in meta["collectors"]
    assert meta["collector_stats"]["gc"]["pauses"]["2"] >= 1  # JSON keys are strings
    assert not [cb for cb in gc.callbacks if isinstance(getattr(cb, "__self__", None), example.GcPauses)]  # stop() undid start()


class PausableA(ToyCollector):
    """A pausable window collector that logs its pauses and resumes by class name."""

    def pause(self) -> None:
        EVENTS.append(("pause", type(self).__name__))

    def resume(self) -> None:
        EVENTS.append(("resume", type(self).__name__))


class PausableB(PausableA):
    pass


def test_window_collectors_pause_newest_first_and_resume_in_registry_order(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampler registered after CUPTI must pause before CUPTI's (slow) detach, not after it."""
    from perfscope.recorder.driver import CollectorSet

    specs = [CollectorSpec(n, f"{__name__}:{n}", "window", option="host_hooks", pausable=True)
             for n in ("PausableA", "PausableB")]
    monkeypatch.setattr(registry, "REGISTRY", tuple(specs))
    EVENTS.clear()
    ctx = CollectorContext(run_path=tmp_path, rank=0, options=CollectorOptions(), note=lambda m: None, env={})
    cs = CollectorSet(RecordOptions(), ctx)
    cs.start(("window",))
    cs.close_window()
    cs.open_window()
    assert [e for e in EVENTS if e[0] in ("pause", "resume")] == [
        ("pause", "PausableB"), ("pause", "PausableA"), ("resume", "PausableA"), ("resume", "PausableB")]


def test_collector_variables_detach_by_default_and_name_the_uvm_mode() -> None:
    """CUPTI is let go of between windows unless PERFSCOPE_CUPTI_DETACH says no; the Unified
    Memory mode passes through (the collector refuses an unknown one with the choices)."""
    from perfscope.collectors.cupti.collector import CuptiCollector
    from perfscope.errors import UsageError
    from perfscope.options import collector_settings

    assert collector_settings({})["cupti_detach"] is True and collector_settings({})["cupti_uvm"] is None
    for off in ("0", "false", "No", " off "):
        assert collector_settings({"PERFSCOPE_CUPTI_DETACH": off})["cupti_detach"] is False
    assert collector_settings({"PERFSCOPE_CUPTI_DETACH": "1"})["cupti_detach"] is True
    assert collector_settings({"PERFSCOPE_CUPTI_UVM": " Always"})["cupti_uvm"] == "always"
    assert CollectorOptions().cupti_detach is True
    with pytest.raises(UsageError, match="auto"):
        CuptiCollector(None, segment_dir="/nonexistent", uvm_counters="sometimes")
