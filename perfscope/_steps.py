"""Step boundaries, the recording schedule and its windows (pure logic, no clocks, no torch).

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

Each step has a *phase* (:data:`OFF`, :data:`WARMUP`, :data:`ACTIVE`), from the
:class:`Schedule` (torch.profiler's wait / warmup / active / repeat cycle) or, for an
on-demand recording, from the trigger requests it was given.  Only active steps become
``steps`` rows; the recorder collects in warm-up steps and drops what they produced
(:func:`dropped_mask`), as torch.profiler does.  Every window (its warm-up and active
steps and their times) is kept in :attr:`StepTracker.windows`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from perfscope.errors import UsageError

OFF, WARMUP, ACTIVE = "off", "warmup", "active"
#: the spelling of an on-demand schedule (``record --on-demand``, ``profile(schedule="on-demand")``)
ON_DEMAND = "on-demand"
# text keys -> Schedule fields (torch.profiler.schedule's names first, perfscope's own after)
_KEYS = {"wait": "wait", "warmup": "warmup", "active": "record", "repeat": "repeat", "skip_first": "skip",
         "skip": "skip", "record": "record"}


@dataclass(frozen=True)
class Schedule:
    """Which steps to record: torch.profiler's wait / warmup / active / repeat cycle.

    After ``skip`` steps, each cycle waits ``wait`` steps (nothing collected), collects
    ``warmup`` steps and drops them (the collectors' start-up cost lands there), then
    records ``record`` steps (torch.profiler's ``active``); ``repeat`` cycles, 0 meaning
    until the end.  ``record=None`` records every step after the first wait and warm-up.
    ``Schedule(skip=N, record=M)`` (or ``(N, M)``) is one window of M steps after N.
    ``on_demand=True``: no windows of its own; ``perfscope trigger`` opens them.

    :meth:`coerce` also takes ``"wait=1,warmup=1,active=3,repeat=2"`` texts (:meth:`parse`)
    and dicts with the same keys, with torch.profiler's defaults (``repeat=0``).
    """

    skip: int = 0
    record: int | None = None
    wait: int = 0
    warmup: int = 0
    repeat: int = 1
    on_demand: bool = False

    def __post_init__(self) -> None:
        for name in ("skip", "wait", "warmup", "repeat"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise UsageError(f"schedule {name} must be a non-negative int, not {v!r}")
        if self.record is not None and (not isinstance(self.record, int) or isinstance(self.record, bool) or self.record < 1):
            raise UsageError(f"schedule record (active) must be a positive int or None, not {self.record!r}")
        if self.on_demand and (self.skip, self.record, self.wait, self.warmup, self.repeat) != (0, None, 0, 0, 1):
            raise UsageError("an on-demand recording has no schedule of its own: use either --on-demand or --schedule")

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Read ``wait=W,warmup=U,active=A,repeat=R[,skip_first=S]`` (or ``on-demand``).

        Keys not given take torch.profiler.schedule's defaults (0; ``active`` is required).

        Raises:
            UsageError: an unknown or repeated key, a value that is not a non-negative
                integer, or no ``active``; the message shows the expected form.
        """
        form = "expected wait=W,warmup=U,active=A,repeat=R (torch.profiler's schedule; repeat=0: until the end)"
        text = text.strip()
        if text.replace("_", "-").lower() == ON_DEMAND:
            return cls(on_demand=True)
        values: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, raw = (s.strip() for s in part.partition("="))
            if not eq or key.replace("-", "_") not in _KEYS or key == "record":
                raise UsageError(f"bad schedule {text!r}: unknown item {part!r}; {form}")
            key = key.replace("-", "_")
            if key in values:
                raise UsageError(f"bad schedule {text!r}: {key} is given twice; {form}")
            if not raw.isdigit():
                raise UsageError(f"bad schedule {text!r}: {key} must be a non-negative integer, not {raw!r}; {form}")
            values[key] = int(raw)
        if "active" not in values or values["active"] < 1:
            raise UsageError(f"bad schedule {text!r}: active must be given and at least 1; {form}")
        return cls.coerce(values)  # type: ignore[return-value]

    @classmethod
    def coerce(cls, value: Any) -> Schedule | None:
        """Return ``value`` as a Schedule (None stays None).

        Accepts a Schedule, a ``(skip, record)`` pair, a text (:meth:`parse`), or a dict
        of Schedule fields or torch.profiler.schedule keywords (``wait``, ``warmup``,
        ``active``, ``repeat``, ``skip_first``; ``repeat`` is then 0 unless given).

        Raises:
            UsageError: anything else, with the accepted forms.
        """
        if value is None or isinstance(value, Schedule):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        try:
            if isinstance(value, dict):
                torch_style = any(k in value for k in ("active", "skip_first"))
                kw: dict[str, Any] = {str(_KEYS.get(k, k)): v for k, v in value.items()}
                if len(kw) != len(value):
                    raise TypeError("a field given under two names")
                if torch_style and "repeat" not in value:
                    kw["repeat"] = 0
                return cls(**kw)
            if isinstance(value, (tuple, list)) and len(value) == 2:
                return cls(int(value[0]), None if value[1] is None else int(value[1]))
        except (TypeError, ValueError):
            pass  # unknown keys or non-numbers: the message below says what is accepted
        raise UsageError(
            f"schedule must be perfscope.Schedule(skip=N, record=M), a (skip, record) pair, a text such as "
            f"'wait=1,warmup=1,active=3,repeat=2', '{ON_DEMAND}', or None, not {value!r}"
        )

    def phase(self, step: int) -> str:
        """The phase of step ``step``: :data:`OFF`, :data:`WARMUP` or :data:`ACTIVE`."""
        k = step - self.skip
        if self.on_demand or k < 0:
            return OFF
        if self.record is None:
            return OFF if k < self.wait else WARMUP if k < self.wait + self.warmup else ACTIVE
        cycle = self.wait + self.warmup + self.record
        if self.repeat and k // cycle >= self.repeat:
            return OFF
        m = k % cycle
        return OFF if m < self.wait else WARMUP if m < self.wait + self.warmup else ACTIVE

    def contains(self, step: int) -> bool:
        """True when step ``step`` is recorded (active)."""
        return self.phase(step) == ACTIVE

    def last_step(self) -> int | None:
        """The last step that is not :data:`OFF` for good, or None when the schedule never ends."""
        if self.on_demand or self.record is None or self.repeat == 0:
            return None
        return self.skip + self.repeat * (self.wait + self.warmup + self.record) - 1

    def as_dict(self) -> dict[str, Any]:
        """The rank metadata's ``schedule``: ``skip`` and ``record``, plus ``wait``,
        ``warmup``, ``repeat`` and ``on_demand`` where they differ from their defaults."""
        out: dict[str, Any] = {"skip": self.skip, "record": self.record}
        for k, v in asdict(self).items():
            if k not in out and v != getattr(Schedule, k):
                out[k] = v
        return out


@dataclass
class Window:
    """One recording window of a rank.

    Attributes:
        first_step, last_step: its active steps (last_step None while it is open).
        warmup_start_ns: when its warm-up began (None: no warm-up); records from then
            to ``start_ns`` are dropped.
        start_ns, end_ns: host times of its first active step's start and last one's end
            (None: not reached yet; 0: from the start of recording, whose step 0 has no
            known start under ``perfscope record``).
        request: the trigger request that opened it (on-demand), else None.
    """

    first_step: int | None = None
    last_step: int | None = None
    warmup_start_ns: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    request: str | None = None


@dataclass(frozen=True)
class _Plan:
    """An on-demand window: warm-up from ``warm_from``, active ``active_from`` to ``active_to`` (excl.)."""

    warm_from: int
    active_from: int
    active_to: int
    request: str


class StepTracker:
    """Turns boundaries into ``steps`` rows and tells when each step's phase changes.

    Args:
        schedule: the windows to record (None: everything).
        anchor_ns: when step 0 began, or None when unknown (step 0 is then not written).
        on_phase: called with the new phase whenever the phase of the step that begins
            differs from the previous step's (and with nothing at construction: read
            :attr:`phase`).
    """

    def __init__(self, schedule: Schedule | None, anchor_ns: int | None, on_phase: Callable[[str], None] | None = None) -> None:
        self.schedule = schedule or Schedule()
        self.mode: str | None = None
        self.count = 0
        self.last_ns = anchor_ns
        self.windows: list[Window] = []
        self._on_phase = on_phase
        self._pending: list[int] = []
        self._rows: list[tuple[int, int, int, str, str]] = []
        self._requests: list[tuple[str, int, int, int]] = []
        self._plan: _Plan | None = None
        self.phase = OFF
        self._enter(self._phase_of(0), anchor_ns if anchor_ns is not None else 0, notify=False)

    @property
    def active(self) -> bool:
        """True while the current step is recorded."""
        return self.phase == ACTIVE

    @property
    def finished(self) -> bool:
        """True once the schedule has no window left (never for on-demand or endless schedules)."""
        last = self.schedule.last_step()
        return last is not None and self.count > last

    def request(self, request_id: str, steps: int, warmup: int = 0, align: int = 1) -> None:
        """Queue an on-demand window of ``steps`` active steps after ``warmup`` warm-up steps,
        its first active step a multiple of ``align`` (so that ranks seeing the request a
        step apart still open the same steps).  Windows open one after the other."""
        self._requests.append((request_id, int(steps), int(warmup), max(1, int(align))))

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
        if self.last_ns is not None and self.phase == ACTIVE:
            self._rows.append((k, self.last_ns, t_ns - self.last_ns, f"step#{k}", source))
        self.count = k + 1
        self.last_ns = t_ns
        new = self._phase_of(self.count)
        if new != self.phase or (new != OFF and self._next_request()):
            self._enter(new, t_ns, notify=new != self.phase)

    def _phase_of(self, step: int) -> str:
        if not self.schedule.on_demand:
            return self.schedule.phase(step)
        if self._plan is not None and step >= self._plan.active_to:
            self._plan = None
        if self._plan is None and self._requests:
            rid, steps, warmup, align = self._requests.pop(0)
            first = step + warmup
            first += -first % align
            self._plan = _Plan(first - warmup, first, first + steps, rid)
        p = self._plan
        if p is None or step < p.warm_from:
            return OFF
        return WARMUP if step < p.active_from else ACTIVE

    def _next_request(self) -> bool:
        """True when the on-demand window beginning is another request's than the last window's."""
        return self._plan is not None and bool(self.windows) and self.windows[-1].request != self._plan.request

    def _enter(self, new: str, t_ns: int, *, notify: bool) -> None:
        """Bookkeeping of :attr:`windows` when the step beginning at ``t_ns`` has phase ``new``."""
        old, w = self.phase, (self.windows[-1] if self.windows else None)
        if old == ACTIVE and w is not None:
            w.last_step, w.end_ns = self.count - 1, t_ns
        if new != OFF and (old == OFF or (old == ACTIVE and new == WARMUP) or self._next_request()):
            w = Window(request=self._plan.request if self._plan is not None else None)
            self.windows.append(w)
        if new == WARMUP and w is not None:
            w.warmup_start_ns = t_ns
        if new == ACTIVE and w is not None:
            w.first_step, w.start_ns = self.count, t_ns
        self.phase = new
        if notify and self._on_phase is not None:
            self._on_phase(new)

    def dropped_intervals(self) -> list[tuple[int, int | None]]:
        """Host-time intervals whose records are dropped (the warm-ups; end None: still warming up)."""
        return [(w.warmup_start_ns, w.start_ns) for w in self.windows if w.warmup_start_ns is not None]

    def windows_meta(self) -> list[dict[str, Any]]:
        """:attr:`windows` as the rank metadata's ``windows`` list."""
        return [asdict(w) for w in self.windows]

    def drain(self) -> dict[str, list[Any]] | None:
        """Remove the finished step rows and return them as ``steps`` columns (None if none)."""
        n = len(self._rows)
        if not n:
            return None
        rows = self._rows[:n]
        del self._rows[:n]
        step, start, dur, name, source = (list(c) for c in zip(*rows))
        return {"step": step, "start_ns": start, "dur_ns": dur, "name": name, "source": source}


def dropped_mask(starts: Any, intervals: Sequence[tuple[int, int | None]]) -> Any:
    """True where a start time (int64 ns) falls inside one of ``intervals`` (``[lo, hi)``;
    ``hi`` None: open-ended); the intervals are disjoint and in time order."""
    import numpy as np  # here: importing the recorder's step logic must stay cheap

    starts = np.asarray(starts, dtype=np.int64)
    if not len(intervals) or not len(starts):
        return np.zeros(len(starts), dtype=bool)
    lo = np.fromiter((a for a, _ in intervals), np.int64, len(intervals))
    hi = np.fromiter((np.iinfo(np.int64).max if b is None else b for _, b in intervals), np.int64, len(intervals))
    idx = np.searchsorted(lo, starts, side="right") - 1
    return (idx >= 0) & (starts < hi[np.clip(idx, 0, None)])


def drop_rows(data: Any, intervals: Sequence[tuple[int, int | None]]) -> tuple[Any, int]:
    """``data`` (a pyarrow Table or a dict of columns) without the rows whose ``start_ns``
    (else ``ts_ns``) lies in ``intervals``; returns it and the number of rows dropped.
    Data with neither column is returned whole."""
    names = list(data.column_names) if hasattr(data, "column_names") else list(data)
    col = next((c for c in ("start_ns", "ts_ns") if c in names), None)
    if col is None or not intervals:
        return data, 0
    import numpy as np

    # An Arrow table's column read through perfscope.store.arrays, not np.asarray or
    # pa.array: those import pandas, which the recording process does without (~33 MB).
    if hasattr(data, "column_names"):
        from perfscope.store.arrays import from_numpy, int_values

        drop = dropped_mask(int_values(data.column(col).combine_chunks(), null=0), intervals)
        n = int(drop.sum())
        return (data.filter(from_numpy(~drop)), n) if n else (data, 0)
    drop = dropped_mask(np.asarray(data[col]), intervals)
    n = int(drop.sum())
    if not n:
        return data, 0
    keep = np.flatnonzero(~drop)
    return {k: [v[i] for i in keep] for k, v in data.items()}, n


def settled_warmups(windows: Sequence[dict[str, Any]]) -> list[tuple[int, int | None]]:
    """The warm-up intervals of a rank's ``windows`` metadata whose end is known: what a
    decoder in another process may drop (an open one may already hold active records)."""
    return [(w["warmup_start_ns"], w["start_ns"]) for w in windows
            if w.get("warmup_start_ns") is not None and w.get("start_ns") is not None]


__all__ = ["Schedule", "StepTracker", "Window", "dropped_mask", "drop_rows", "settled_warmups", "OFF", "WARMUP",
           "ACTIVE", "ON_DEMAND"]
