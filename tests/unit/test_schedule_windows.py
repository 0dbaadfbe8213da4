"""torch.profiler-style schedules, the window state machine and warm-up dropping (pure logic)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from perfscope._steps import ACTIVE, OFF, WARMUP, Schedule, StepTracker, dropped_mask
from perfscope.errors import UsageError
from perfscope.options import env_schedule, schedule_env
from perfscope.recorder.windows import WarmupFilter


def torch_phase(step: int, wait: int, warmup: int, active: int, repeat: int, skip_first: int = 0) -> str:
    """torch.profiler.schedule's own rule (torch/profiler/profiler.py), spelled out."""
    if step < skip_first:
        return OFF
    step -= skip_first
    n = wait + warmup + active
    if repeat > 0 and step / n >= repeat:
        return OFF
    mod = step % n
    return OFF if mod < wait else WARMUP if mod < wait + warmup else ACTIVE


@pytest.mark.parametrize("args", [(2, 1, 3, 2, 0), (0, 0, 1, 0, 0), (1, 2, 2, 0, 3), (50, 2, 5, 0, 0), (0, 1, 1, 3, 1)])
def test_phases_match_torch_profiler_schedule(args: tuple[int, ...]) -> None:
    wait, warmup, active, repeat, skip_first = args
    s = Schedule.parse(f"wait={wait},warmup={warmup},active={active},repeat={repeat},skip_first={skip_first}")
    assert [s.phase(k) for k in range(300)] == [torch_phase(k, *args) for k in range(300)]


def test_parse_defaults_follow_torch_and_legacy_forms_keep_theirs() -> None:
    assert Schedule.parse("active=3") == Schedule(record=3, repeat=0)
    assert Schedule.parse(" wait=1 , warmup=2, active=3 ,repeat=4") == Schedule(record=3, wait=1, warmup=2, repeat=4)
    assert Schedule.coerce({"wait": 1, "active": 2}) == Schedule(record=2, wait=1, repeat=0)
    assert Schedule.coerce("on-demand") == Schedule(on_demand=True)
    assert Schedule(2, 3).as_dict() == {"skip": 2, "record": 3}  # one window, as before
    s = Schedule.parse("wait=50,warmup=2,active=5,repeat=0")
    assert s.as_dict() == {"skip": 0, "record": 5, "wait": 50, "warmup": 2, "repeat": 0}
    assert Schedule.coerce(s.as_dict()) == s


@pytest.mark.parametrize("text, says", [
    ("wait=1,warmup=1", "active must be given"),
    ("active=0", "active must be given and at least 1"),
    ("wait=1,active=2,wait=3", "wait is given twice"),
    ("wait=-1,active=2", "must be a non-negative integer"),
    ("active=two", "must be a non-negative integer"),
    ("wiat=1,active=2", "unknown item 'wiat=1'"),
    ("record=2", "unknown item"),
    ("active", "unknown item"),
])
def test_bad_schedule_texts_say_what_is_expected(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says) as e:
        Schedule.parse(text)
    assert "wait=W,warmup=U,active=A,repeat=R" in str(e.value)


def test_on_demand_excludes_a_cycle() -> None:
    with pytest.raises(UsageError, match="either --on-demand or --schedule"):
        Schedule(record=3, on_demand=True)


def test_schedule_travels_through_the_environment() -> None:
    s = Schedule.parse("wait=3,warmup=1,active=2,repeat=0")
    assert env_schedule(schedule_env(s)) == s
    assert env_schedule(schedule_env(Schedule(on_demand=True))) == Schedule(on_demand=True)
    assert env_schedule({}) is None
    assert env_schedule({"PERFSCOPE_SCHEDULE": "wait=1,active=1"}) == Schedule(record=1, wait=1, repeat=0)
    with pytest.raises(UsageError):
        env_schedule({"PERFSCOPE_SCHEDULE": "[1, 2]"})


def run_steps(tracker: StepTracker, n: int, dt: int = 10) -> None:
    for i in range(1, n + 1):
        tracker.explicit(i * dt)


def test_state_machine_over_a_step_sequence() -> None:
    # GIVEN wait=2, warmup=1, active=2, repeat=2 (cycle of 5 steps), explicit steps every 10 ns from 0
    phases: list[str] = []
    t = StepTracker(Schedule.parse("wait=2,warmup=1,active=2,repeat=2"), anchor_ns=0, on_phase=phases.append)
    assert t.phase == OFF
    run_steps(t, 14)
    # THEN the phase changes at the boundaries of steps 2, 3, 5, 7, 8, 10 and never after
    assert phases == [WARMUP, ACTIVE, OFF, WARMUP, ACTIVE, OFF]
    assert t.drain()["step"] == [3, 4, 8, 9]  # active steps only
    assert t.finished
    # each window: its active steps and times; its warm-up (step 2 begins at 20) dropped
    assert [(w.first_step, w.last_step, w.warmup_start_ns, w.start_ns, w.end_ns) for w in t.windows] == [
        (3, 4, 20, 30, 50), (8, 9, 70, 80, 100)]
    assert t.dropped_intervals() == [(20, 30), (70, 80)]


def test_back_to_back_cycles_without_wait_open_a_new_window_each() -> None:
    phases: list[str] = []
    t = StepTracker(Schedule.parse("warmup=1,active=1,repeat=0"), anchor_ns=0, on_phase=phases.append)
    assert t.phase == WARMUP  # step 0 is a warm-up step
    run_steps(t, 4)
    assert phases == [ACTIVE, WARMUP, ACTIVE, WARMUP]
    assert t.drain()["step"] == [1, 3]
    assert [(w.first_step, w.last_step) for w in t.windows] == [(1, 1), (3, 3), (None, None)]
    assert not t.finished  # repeat=0: never


def test_on_demand_opens_one_window_per_request_aligned() -> None:
    phases: list[str] = []
    t = StepTracker(Schedule(on_demand=True), anchor_ns=0, on_phase=phases.append)
    run_steps(t, 5)
    assert phases == [] and t.drain() is None and t.windows == []
    # a request seen while step 5 begins: 1 warm-up step, 3 steps, first active step a multiple of 4
    t.request("r1", steps=3, warmup=1, align=4)
    for i in range(6, 20):
        t.explicit(i * 10)
    assert t.drain()["step"] == [8, 9, 10]
    assert [(w.request, w.first_step, w.last_step, w.warmup_start_ns) for w in t.windows] == [("r1", 8, 10, 70)]
    assert phases == [WARMUP, ACTIVE, OFF]
    # two requests at once open one window after the other
    t.request("r2", steps=1)
    t.request("r3", steps=2)
    for i in range(20, 30):
        t.explicit(i * 10)
    assert [(w.request, w.first_step, w.last_step) for w in t.windows[1:]] == [("r2", 20, 20), ("r3", 21, 22)]


def test_dropped_mask_and_the_warmup_filter() -> None:
    starts = np.array([5, 20, 25, 30, 75, 200], dtype=np.int64)
    assert dropped_mask(starts, [(20, 30), (70, None)]).tolist() == [False, True, True, False, True, True]
    assert dropped_mask(starts, []).tolist() == [False] * 6

    class Sink:
        def __init__(self) -> None:
            self.got: list[tuple[str, object]] = []

        def append(self, table: str, data: object) -> None:
            self.got.append((table, data))

    sink = Sink()
    f = WarmupFilter(sink, lambda: [(20, 30)])
    f.append("kernels", pa.table({"start_ns": pa.array(starts), "dur_ns": pa.array(np.ones(6, np.int64))}))
    f.append("metrics", {"ts_ns": [10, 22, 40], "value": [1.0, 2.0, 3.0]})
    f.append("other", {"name": ["x"]})
    assert sink.got[0][1]["start_ns"].to_pylist() == [5, 30, 75, 200]
    assert sink.got[1][1] == {"ts_ns": [10, 40], "value": [1.0, 3.0]}
    assert sink.got[2][1] == {"name": ["x"]}
    assert f.dropped_rows == 3


def test_only_settled_warmups_are_dropped_by_a_decoder_elsewhere() -> None:
    from perfscope._steps import settled_warmups

    t = StepTracker(Schedule.parse("wait=1,warmup=1,active=1,repeat=0"), anchor_ns=0)
    run_steps(t, 4)  # step 1 warm-up (10-20), step 2 active, step 4 warm-up still open at 40
    assert t.dropped_intervals() == [(10, 20), (40, None)]
    assert settled_warmups(t.windows_meta()) == [(10, 20)]
