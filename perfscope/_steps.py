"""Step boundaries and the recording schedule (pure logic, no clocks, no torch).

A *boundary* ends one step and begins the next.  Boundaries come from two sources:

* ``explicit``: the user calls ``prof.step()`` once per iteration;
* ``optimizer``: perfscope's optimizer post-step hook fires.

Step ``k`` (numbered from 0) is the interval from boundary ``k - 1`` to boundary ``k``;
step 0 begins at the *anchor* (``profile().start()``).  Under ``perfscope record`` there
is no meaningful anchor (recording starts with the interpreter, long before training),
so there step 0 is not written and the first row is step 1.  What follows the last
boundary (teardown, or a step cut short by stop) is not a step.

Both sources are often active at once (``opt.step(); prof.step()`` in one loop).  Explicit
steps win: optimizer boundaries are held back until two of them have been seen without
an explicit step in between, and dropped as soon as ``prof.step()`` is called.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfscope.errors import UsageError


@dataclass(frozen=True)
class Schedule:
    """Record only part of the run: skip ``skip`` warm-up steps, then record ``record`` steps.

    ``record=None`` records every step after the warm-up.  Accepts ``(skip, record)``
    tuples and ``{"skip": .., "record": ..}`` dicts through :meth:`coerce`.
    """

    skip: int = 0
    record: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.skip, int) or self.skip < 0:
            raise UsageError(f"schedule skip must be a non-negative int, not {self.skip!r}")
        if self.record is not None and (not isinstance(self.record, int) or self.record < 1):
            raise UsageError(f"schedule record must be a positive int or None, not {self.record!r}")

    @classmethod
    def coerce(cls, value: Any) -> Schedule | None:
        """Return ``value`` as a Schedule (None stays None).

        Raises:
            UsageError: the value is not a Schedule, a (skip, record) pair or a dict.
        """
        if value is None or isinstance(value, Schedule):
            return value
        try:
            if isinstance(value, dict):
                return cls(**value)
            if isinstance(value, (tuple, list)) and len(value) == 2:
                return cls(int(value[0]), None if value[1] is None else int(value[1]))
        except (TypeError, ValueError):
            pass  # unknown keys or non-numbers: the message below says what is accepted
        raise UsageError(
            f"schedule must be perfscope.Schedule(skip=N, record=M), a (skip, record) pair or None, not {value!r}"
        )

    def contains(self, step: int) -> bool:
        """True when step ``step`` is inside the recorded window."""
        return step >= self.skip and (self.record is None or step < self.skip + self.record)


class StepTracker:
    """Turns boundaries into ``steps`` rows and tells when the schedule's window opens/closes.

    Args:
        schedule: the window to record (None: everything).
        anchor_ns: when step 0 began, or None when unknown (step 0 is then not written).
        on_active: called with True when the window opens and False when it closes.
    """

    def __init__(self, schedule: Schedule | None, anchor_ns: int | None, on_active: Callable[[bool], None] | None = None) -> None:
        self.schedule = schedule or Schedule()
        self.mode: str | None = None
        self.count = 0
        self.last_ns = anchor_ns
        self.active = self.schedule.skip == 0
        self.finished = False
        self._on_active = on_active
        self._pending: list[int] = []
        self._rows: list[tuple[int, int, int, str, str]] = []

    def explicit(self, t_ns: int) -> None:
        """A ``prof.step()`` call at ``t_ns``."""
        if self.mode != "explicit":
            self.mode = "explicit"
            self._pending.clear()
        self._boundary(t_ns, "explicit")

    def optimizer(self, t_ns: int) -> None:
        """An optimizer step ended at ``t_ns``."""
        if self.mode == "explicit":
            return
        if self.mode is None:
            self._pending.append(t_ns)
            if len(self._pending) < 2:
                return
            self.mode = "optimizer"
            held, self._pending = self._pending, []
            for t in held:
                self._boundary(t, "optimizer")
            return
        self._boundary(t_ns, "optimizer")

    def _boundary(self, t_ns: int, source: str) -> None:
        k = self.count
        if self.last_ns is not None and self.schedule.contains(k):
            self._rows.append((k, self.last_ns, t_ns - self.last_ns, f"step#{k}", source))
        self.count = k + 1
        self.last_ns = t_ns
        if self.finished:
            return
        s = self.schedule
        if not self.active and self.count == s.skip:
            self._set_active(True)
        if s.record is not None and self.count >= s.skip + s.record:
            self.finished = True
            if self.active:
                self._set_active(False)

    def _set_active(self, on: bool) -> None:
        self.active = on
        if self._on_active is not None:
            self._on_active(on)

    def drain(self) -> dict[str, list[Any]] | None:
        """Remove the finished step rows and return them as ``steps`` columns (None if none)."""
        n = len(self._rows)
        if not n:
            return None
        rows = self._rows[:n]
        del self._rows[:n]
        step, start, dur, name, source = (list(c) for c in zip(*rows))
        return {"step": step, "start_ns": start, "dur_ns": dur, "name": name, "source": source}


__all__ = ["Schedule", "StepTracker"]
