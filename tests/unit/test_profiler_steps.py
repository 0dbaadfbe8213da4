"""Step boundaries and the schedule (perfscope._steps), with a fake clock."""
from __future__ import annotations

import pytest

from perfscope._steps import ACTIVE, Schedule, StepTracker
from perfscope.errors import UsageError


def rows(tracker: StepTracker) -> list[tuple[int, int, int, str]]:
    data = tracker.drain() or {"step": [], "start_ns": [], "dur_ns": [], "source": []}
    return list(zip(data["step"], data["start_ns"], data["dur_ns"], data["source"]))


def test_explicit_steps_run_from_the_anchor_to_each_boundary() -> None:
    t = StepTracker(None, anchor_ns=100)
    for ts in (150, 170, 200):
        t.explicit(ts)
    assert rows(t) == [(0, 100, 50, "explicit"), (1, 150, 20, "explicit"), (2, 170, 30, "explicit")]
    assert t.drain() is None  # drained once


def test_without_anchor_step_zero_is_not_written() -> None:
    t = StepTracker(None, anchor_ns=None)
    for ts in (10, 30, 60):
        t.explicit(ts)
    assert [r[0] for r in rows(t)] == [1, 2]


def test_optimizer_steps_are_committed_after_two_boundaries() -> None:
    t = StepTracker(None, anchor_ns=0)
    t.optimizer(10)
    assert t.mode is None and rows(t) == []
    t.optimizer(25)
    assert t.mode == "optimizer"
    t.optimizer(45)
    assert rows(t) == [(0, 0, 10, "optimizer"), (1, 10, 15, "optimizer"), (2, 25, 20, "optimizer")]


def test_explicit_steps_win_over_optimizer_steps_in_the_same_loop() -> None:
    # GIVEN a loop doing opt.step(); prof.step()
    t = StepTracker(None, anchor_ns=0)
    for i in range(1, 5):
        t.optimizer(i * 10 - 1)
        t.explicit(i * 10)
    # THEN only explicit rows exist, one per iteration
    got = rows(t)
    assert [r[3] for r in got] == ["explicit"] * 4
    assert [(r[0], r[1], r[2]) for r in got] == [(0, 0, 10), (1, 10, 10), (2, 20, 10), (3, 30, 10)]


def test_schedule_skips_warmup_and_records_m_steps_with_window_callbacks() -> None:
    events: list[bool] = []
    t = StepTracker(Schedule(skip=2, record=3), anchor_ns=0, on_phase=lambda p: events.append(p == ACTIVE))
    assert not t.active
    for i in range(1, 9):
        t.explicit(i * 10)
    assert [r[0] for r in rows(t)] == [2, 3, 4]
    assert events == [True, False]
    assert t.finished and not t.active


def test_schedule_starting_at_zero_is_active_from_the_start() -> None:
    events: list[bool] = []
    t = StepTracker(Schedule(skip=0, record=1), anchor_ns=0, on_phase=lambda p: events.append(p == ACTIVE))
    assert t.active
    t.explicit(5)
    t.explicit(9)
    assert [r[0] for r in rows(t)] == [0]
    assert events == [False]


@pytest.mark.parametrize("value, expected", [
    (None, None),
    ((3, 5), Schedule(3, 5)),
    ([1, None], Schedule(1, None)),
    ({"skip": 2}, Schedule(2, None)),
    (Schedule(4, 1), Schedule(4, 1)),
])
def test_schedule_coerce(value: object, expected: Schedule | None) -> None:
    assert Schedule.coerce(value) == expected


@pytest.mark.parametrize("bad", ["3", (1, 2, 3), {"skip": -1}, (0, 0)])
def test_bad_schedules_are_usage_errors(bad: object) -> None:
    with pytest.raises(UsageError):
        Schedule.coerce(bad)


@pytest.mark.parametrize("bad", [{"skp": 1}, ("a", 1), [1, "many"]])
def test_malformed_schedules_are_usage_errors(bad: object) -> None:
    with pytest.raises(UsageError):
        Schedule.coerce(bad)
