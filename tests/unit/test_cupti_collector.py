"""The CUPTI collector's behaviour where no GPU is present (CI)."""
from __future__ import annotations

import pytest

from perfscope.collectors.cupti import DEFAULT_KINDS, CuptiCollector, available, nvtx_injection_env
from perfscope.collectors.cupti.probe import ClockCheck, check_clock
from perfscope.errors import CuptiUnavailableError, UsageError


class _Writer:
    def __init__(self) -> None:
        self.batches: list = []

    def append(self, table: str, batch: object) -> None:
        self.batches.append((table, batch))


def _no_gpu() -> bool:
    ok, _ = available()
    return not ok


def test_available_gives_a_reason() -> None:
    ok, why = available()
    assert isinstance(ok, bool)
    assert ok or why


@pytest.mark.skipif(not _no_gpu(), reason="a GPU with CUPTI is present")
def test_start_without_gpu_raises_cupti_unavailable() -> None:
    c = CuptiCollector(_Writer())
    with pytest.raises(CuptiUnavailableError, match="cannot be recorded"):
        c.start()
    c.flush()  # no-ops after a failed start
    assert c.stop()["rows"] == {}


def test_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown CUPTI collector kind"):
        CuptiCollector(_Writer(), kinds=("kernel", "kernels"))


def test_nvtx_injection_env_points_at_libcupti(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    env = nvtx_injection_env()
    assert env == {} or "libcupti.so" in env["NVTX_INJECTION64_PATH"]
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/opt/nsight/libToolsInjection64.so")
    assert nvtx_injection_env() == {}  # never override another tool


def test_clock_check_epoch_and_offset() -> None:
    import time

    c = check_clock(lambda: time.clock_gettime_ns(time.CLOCK_REALTIME))
    assert c == ClockCheck(0, True, c.bracket_ns, c.error_ns)
    off = check_clock(lambda: time.clock_gettime_ns(time.CLOCK_REALTIME) - 5_000_000_000)
    assert not off.epoch and abs(off.offset_ns - 5_000_000_000) < 50_000_000


class _FakeSink:
    def __init__(self, rc: int) -> None:
        self.rc, self.calls = rc, 0

    def subscribe(self) -> int:
        self.calls += 1
        return self.rc


@pytest.mark.parametrize(("source", "kinds", "rc", "native"), [
    ("callback", DEFAULT_KINDS, 0, True),
    ("callback", DEFAULT_KINDS, 39, False),  # slot held: the activity kinds take the API records
    ("callback", ("kernel", "memcpy"), 0, False),  # no API kind asked for: nothing to subscribe
    ("activity", DEFAULT_KINDS, 0, False),
])
def test_api_records_come_from_the_callback_when_the_sink_can_subscribe(source, kinds, rc, native) -> None:
    coll = CuptiCollector(_Writer(), kinds=kinds, api_source=source)
    fake = _FakeSink(rc)
    assert coll._subscribe_native(fake) is native
    assert coll._native_subscriber is native and coll._api_from_callback is native
    assert fake.calls == (1 if source == "callback" and "runtime" in kinds else 0)


def test_api_source_from_environment_and_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # The variable is read by perfscope.options and reaches the collector through the
    # recorder's CollectorOptions and the CUPTI recording adapter.
    import types
    from pathlib import Path

    from perfscope.collectors.base import CollectorContext
    from perfscope.collectors.cupti import recording
    from perfscope.options import RecordOptions

    made: list[CuptiCollector] = []

    class Recorded(CuptiCollector):
        def start(self) -> None:
            made.append(self)

    fake = types.SimpleNamespace(available=lambda: (True, ""), CuptiCollector=Recorded, nvtx_injection_env=lambda: {})
    monkeypatch.setattr(recording, "cupti", fake)

    def api_source() -> str:
        ctx = CollectorContext(run_path=Path("/nowhere"), rank=0, options=RecordOptions().collector_options(),
                               note=lambda m: None, env={}, writer=_Writer())
        assert recording.CuptiRecording().start(ctx)
        return made[-1].api_source

    monkeypatch.setenv("PERFSCOPE_CUPTI_API", "activity")
    assert api_source() == "activity"
    monkeypatch.delenv("PERFSCOPE_CUPTI_API")
    assert api_source() == "callback"
    with pytest.raises(UsageError, match="API-record source"):
        CuptiCollector(_Writer(), api_source="sometimes")


def test_one_collector_records_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native sink and CUPTI are per process: a second start is refused before it can
    reset the sink under the first one; a failed start leaves the way free."""
    from perfscope.collectors.cupti import collector
    from perfscope.errors import CollectorError

    monkeypatch.setattr(CuptiCollector, "_start_checked", lambda self, t0: None)
    first = CuptiCollector(_Writer())
    first.start()
    try:
        with pytest.raises(CollectorError, match="another CuptiCollector is recording"):
            CuptiCollector(_Writer()).start()
    finally:
        collector._release(first)

    def refuse(self: CuptiCollector, t0: int) -> None:
        raise CuptiUnavailableError("no GPU")

    monkeypatch.setattr(CuptiCollector, "_start_checked", refuse)
    with pytest.raises(CuptiUnavailableError):
        CuptiCollector(_Writer()).start()
    assert collector._ACTIVE == []


class _SwitchSink:
    """Records the sink calls pause/resume/flush make."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def switch_api(self, on: bool) -> int:
        self.calls.append(("switch_api", on))
        return 0

    def flush(self, forced: bool = False) -> int:
        self.calls.append(("flush", forced))
        return 0


def test_pause_disables_kinds_and_callbacks_and_resume_restores_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from perfscope.collectors.cupti import collector as mod

    log: list[tuple[str, int]] = []
    fake = types.SimpleNamespace(activity_disable=lambda k: log.append(("disable", k)),
                                 activity_enable=lambda k: log.append(("enable", k)),
                                 activity_enable_runtime_api=lambda *a: None, activity_enable_driver_api=lambda *a: None)
    monkeypatch.setattr(mod, "_cupti", lambda: fake)
    coll = CuptiCollector(_Writer())
    sink = _SwitchSink()
    coll._sink, coll._state, coll._native_subscriber, coll._enabled = sink, "running", True, [1, 10]
    monkeypatch.setattr(coll, "_drain", lambda: None)
    coll.pause()
    coll.pause()  # twice: no second round of calls
    assert log == [("disable", 1), ("disable", 10)] and sink.calls == [("switch_api", False)]
    coll.flush()  # the first flush after a pause hands back the partly filled buffers too
    coll.flush()
    assert sink.calls[1:] == [("flush", True), ("flush", False)]
    coll.resume()
    assert log[2:] == [("enable", 1), ("enable", 10)] and sink.calls[-1] == ("switch_api", True)
    coll.flush()
    assert sink.calls[-1] == ("flush", False)


class _DetachSink(_SwitchSink):
    """Records the sink calls of a detach (pause) and a re-attach (resume)."""

    def __getattr__(self, name: str):
        if name in ("set_detached", "unsubscribe", "subscribe", "register", "enable_api"):
            def call(*args: object) -> int:
                self.calls.append((name, args[0] if args and name == "set_detached" else None))
                return 0
            return call
        raise AttributeError(name)


def _detach_fixture(monkeypatch: pytest.MonkeyPatch, profiler_active: bool = False):
    import types

    from perfscope.collectors.cupti import collector as mod
    from perfscope.collectors.cupti import probe

    log: list[tuple[str, object]] = []
    fake = types.SimpleNamespace(
        activity_disable=lambda k: log.append(("disable", k)), activity_enable=lambda k: log.append(("enable", k)),
        activity_enable_runtime_api=lambda *a: None, activity_enable_driver_api=lambda *a: None,
        finalize=lambda: log.append(("finalize", None)), get_timestamp=lambda: __import__("time").time_ns(),
        set_thread_id_type=lambda t: None, ActivityThreadIdType=types.SimpleNamespace(SYSTEM=1),
    )
    monkeypatch.setattr(mod, "_cupti", lambda: fake)
    monkeypatch.setattr(mod.attach, "sync_current_context", lambda: log.append(("sync", None)))
    monkeypatch.setattr(probe, "torch_profiler_active", lambda: profiler_active)
    coll = CuptiCollector(_Writer(), kinds=("kernel", "runtime"), detach=True)
    sink = _DetachSink()
    coll._sink, coll._state = sink, "running"
    coll._native_subscriber = coll._api_from_callback = True
    coll._enabled = [10]  # the kernel kind; runtime records come from the sink's callback
    monkeypatch.setattr(coll, "_drain", lambda: None)
    return coll, sink, log


def test_detach_finalizes_cupti_at_pause_and_attaches_again_at_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    """A paused CUPTI that is merely disabled still costs the step most of what recording
    does (benchmarks/pause_cost.py); with detach the collector flushes what CUPTI holds,
    stops the sink from calling CUPTI, gives the slot back and finalizes, then at resume
    subscribes, registers and enables again."""
    coll, sink, log = _detach_fixture(monkeypatch)
    coll.pause()
    assert log == [("disable", 10), ("sync", None), ("finalize", None)]
    assert sink.calls == [("switch_api", False), ("flush", True), ("set_detached", True), ("unsubscribe", None)]
    assert coll._detached and coll.detaches == 1
    coll.flush()  # nothing is forced after a detach: the records were handed over before the finalize
    assert ("flush", True) not in sink.calls[4:]
    del sink.calls[:], log[:]
    coll.resume()
    assert [c for c, _ in sink.calls] == ["set_detached", "subscribe", "register", "enable_api"]
    assert sink.calls[0] == ("set_detached", False)
    assert log == [("enable", 10)] and not coll._detached and not coll._paused
    assert coll._native_subscriber  # API records from the callback again


def test_no_detach_while_torch_profiler_shares_cupti(monkeypatch: pytest.MonkeyPatch) -> None:
    coll, sink, log = _detach_fixture(monkeypatch, profiler_active=True)
    coll.pause()
    assert ("finalize", None) not in log and not coll._detached
    assert sink.calls == [("switch_api", False)]


def test_detach_keeps_the_uvm_counters_state_for_the_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """The statistics report the Unified Memory counters that were armed (tests/gpu/test_uvm_gpu.py
    reads them), so letting go of CUPTI stops the counters but keeps their state."""
    import types

    coll, _, _ = _detach_fixture(monkeypatch)
    stopped: list[bool] = []
    counters = types.SimpleNamespace(stop=lambda: stopped.append(True), state=lambda: {"counters": []},
                                     enabled=False)  # waiting for a managed allocation
    coll._uvm = counters
    coll.pause()
    assert stopped == [True] and coll._uvm is counters and coll._detached


def test_no_detach_while_the_uvm_counters_are_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turning armed Unified Memory counters off took 2.0 s on the H200 (in cuptiActivityDisable,
    or in cuptiFinalize when left on): far more than a paused window saves, so the collector
    stays attached (kinds disabled) once they are armed."""
    import types

    coll, sink, log = _detach_fixture(monkeypatch)
    coll._uvm = types.SimpleNamespace(stop=lambda: None, state=lambda: {"counters": ["htod"]}, enabled=True)
    coll.pause()
    assert ("finalize", None) not in log and not coll._detached and coll.detaches == 0
    assert sink.calls == [("switch_api", False)]
    coll.resume()
    assert sink.calls[-1] == ("switch_api", True) and not coll._paused
