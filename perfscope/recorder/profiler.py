"""In-process recording: :class:`Profiler` and :func:`profile`.

One :class:`Profiler` object works three ways::

    with perfscope.profile("runs/exp1") as prof:      # context manager
        for batch in loader:
            train_step(batch)
            prof.step()

    @perfscope.profile("runs/exp1")                   # decorator (also bare @perfscope.profile)
    def main(): ...

    prof = perfscope.profile("runs/exp1"); prof.start(); ...; run = prof.stop()

What it records into the run directory (see :mod:`perfscope.store.schema`):

* ``steps``: one row per ``prof.step()`` interval (source ``explicit``); without explicit
  steps, one row per optimizer step (source ``optimizer``) once torch is in use;
* ``markers``: every :func:`perfscope.annotate` range (source ``perfscope``), also emitted
  as an NVTX range so Nsight and CUPTI see it;
* whatever the collectors of :data:`perfscope.collectors.registry.REGISTRY` that the
  options turn on record (host hooks, the NCCL plugin, CUPTI, NVML), driven through
  :class:`perfscope.recorder.driver.CollectorSet`.  A collector that cannot run here
  (no GPU, no cupti-python) leaves a warning saying what is missing; the run goes on.

Data reaches disk every ``flush_interval_s`` from a background thread, so a process
killed outright loses at most that much.  Hooks are removed whenever the profiler stops,
including when an exception escapes the ``with`` block or ``start()`` itself fails.

Under ``perfscope record`` a profiler is already running (started by the injected
``sitecustomize``); a ``perfscope.profile(...)`` in the user's code then records nothing
itself and forwards its ``step()`` calls to the recording one.
"""
from __future__ import annotations

import functools
import os
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from perfscope._rankinfo import gpu_info
from perfscope._steps import ACTIVE, OFF, Schedule, StepTracker
from perfscope.collectors.base import CollectorContext
from perfscope.errors import AlreadyProfilingError, CollectorError, UsageError
from perfscope.options import RecordOptions, env_local_rank, env_rank, env_world_size
from perfscope.recorder import state
from perfscope.recorder.driver import CollectorSet
from perfscope.recorder.flusher import Flusher
from perfscope.recorder.rankmeta import rank_info
from perfscope.recorder.runs import join_or_create_run
from perfscope.recorder.state import PerfscopeWarning
from perfscope.recorder.trigger import RequestPoller
from perfscope.recorder.windows import WarmupFilter

F = TypeVar("F", bound=Callable[..., Any])


class Profiler:
    """Records one process (one rank) of a training job into a run directory.

    Create it with :func:`profile`.  Attributes of interest once started: ``path`` (the
    run directory), ``rank``, ``warnings`` (what could not be recorded).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        schedule: Schedule | tuple[int, int | None] | dict[str, Any] | str | None = None,
        options: RecordOptions | None = None,
        overwrite: bool = False,
        rank: int | None = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        run_id: str | None = None,
        source: str = "profile",
        injected: bool = False,
    ) -> None:
        self._path_arg = path
        self.path = Path(path) if path is not None else None
        self.schedule = Schedule.coerce(schedule)
        self.options = options or RecordOptions()
        self.overwrite = overwrite
        env_r = env_rank()
        self.rank = int(rank if rank is not None else (env_r if env_r is not None else 0))
        lr = env_local_rank()
        self.local_rank = int(local_rank if local_rank is not None else (lr if lr is not None else 0))
        self.world_size = world_size if world_size is not None else (env_world_size() or 1)
        self.run_id = run_id
        self.source = source
        self.warnings: list[str] = []
        self._injected = injected
        self._state = "new"  # new -> running -> stopping -> stopped
        self._attached: Profiler | None = None
        self._created_run = False
        self._writer: Any = None
        self._spans: Any = None
        self._markers: Any = None
        self._steps: StepTracker | None = None
        self._poller: RequestPoller | None = None
        self._collecting = False  # the window collectors are running (not paused)
        self._set: CollectorSet | None = None
        self._facts: dict[str, Any] = {}  # what collectors establish (clock offset)
        self._flush_lock = threading.RLock()
        self._flusher: Flusher | None = None
        self._dead = False
        self._started_ns: int | None = None
        self._last_meta: dict[str, Any] | None = None
        self._error: str | None = None
        self._gpu: dict[str, Any] | None = None

    # -- public API ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._state == "running"

    @property
    def collectors(self) -> list[str]:
        """The collectors that run (``steps`` and the registered ones that started)."""
        if self._steps is None:
            return []
        return ["steps", *(self._set.names if self._set is not None else [])]

    @property
    def dropped_events(self) -> dict[str, int]:
        """Records the collectors lost, per source (known once they stopped)."""
        return dict(self._set.dropped) if self._set is not None else {}

    def start(self) -> Profiler:
        """Start recording and return self.

        Raises:
            AlreadyProfilingError: this profiler, or another one in this process, is running.
            RunExistsError: the run directory holds data and ``overwrite`` is false.
            UsageError: this profiler already recorded once (create a new one).
        """
        with state.LOCK:
            if self._state == "running":
                raise AlreadyProfilingError(
                    f"this profiler is already recording into {self.path}: start() was called twice, "
                    "or the profiler was started and then used in a `with` block; use one or the other"
                )
            if self._state == "stopped":
                raise UsageError(
                    "this profiler has already recorded and stopped; create a new one with perfscope.profile(...) "
                    "(pass overwrite=True to reuse the same directory)"
                )
            current = state.ACTIVE
            if current is not None:
                if current._injected and not self._injected:
                    self._attach(current)
                    return self
                raise AlreadyProfilingError(
                    f"perfscope is already profiling this process into {current.path}; only one profile() can record "
                    "at a time. Remove the inner perfscope.profile(...) (nested `with` blocks or a decorated function "
                    "called inside another profile), or call stop() on the first one before starting another"
                )
            state.set_active(self)
            self._state = "running"
        try:
            self._start()
        except BaseException:
            self._teardown(status="incomplete", reason="start failed")
            raise
        return self

    def step(self) -> None:
        """Mark the end of a training step (and the start of the next).

        Raises:
            UsageError: the profiler is not running.
        """
        if self._attached is not None:
            if self._state == "running":
                self._attached.step()
            return
        if self._state != "running":
            raise UsageError(
                "prof.step() was called on a profiler that is not recording; call it inside "
                "`with perfscope.profile(...) as prof:` or between start() and stop()"
            )
        if self._dead or self._steps is None:
            return
        t = time.time_ns()
        self._poll()
        self._steps.explicit(t)
        if self._gpu is None:
            self._gpu_info()

    def flush(self) -> None:
        """Write everything recorded so far to disk now (also done every flush interval)."""
        if self._attached is not None:
            self._attached.flush()
            return
        if self._state == "running":
            self._flush()

    def emergency_flush(self, reason: str, timeout_s: float = 2.0) -> None:
        """Write what was recorded and mark this rank ``incomplete``, without stopping anything.

        For a process about to be killed while its main thread is stuck (see
        :mod:`perfscope.recorder.inject`): hooks and collectors stay as they are.
        """
        if self._attached is not None or self._state != "running" or self._dead:
            return
        if not self._flush_lock.acquire(timeout=timeout_s):
            return
        try:
            self._write_out("incomplete", reason)
        finally:
            self._flush_lock.release()

    def stop(self, *, status: str = "complete", reason: str | None = None) -> Any:
        """Stop recording, remove every hook, flush, and return the run (a :class:`perfscope.store.Run`).

        Args:
            status: the rank's final status: ``complete``, or ``incomplete`` when stopping
                because the process is being killed.
            reason: why it stopped, kept in the rank file (e.g. ``SIGTERM``).

        Returns:
            the run opened for reading, or None when this profiler was attached to a
            ``perfscope record`` recording or when called a second time.

        Raises:
            CollectorError: the final write failed (the hooks are removed regardless).
        """
        if self._attached is not None:
            self._state = "stopped"
            return None
        with state.LOCK:  # atexit, a signal handler and the user may all call stop()
            if self._state != "running":
                return None
            self._state = "stopping"
        errors = self._teardown(status=status, reason=reason)
        if errors:
            raise CollectorError(f"recording stopped, but writing the run failed: {errors[0]}")
        if self._injected or self.path is None:
            return None
        from perfscope.store import open_run

        return open_run(self.path)

    def __enter__(self) -> Profiler:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            self.stop()
            return
        # The user's exception is what matters: stop quietly, never mask it.
        self._error = f"{exc_type.__name__}: {exc}"
        try:
            self.stop()
        except Exception:  # noqa: BLE001
            pass

    def __call__(self, func: F) -> F:
        """Use the profiler as a decorator: each call of ``func`` is recorded."""
        if not callable(func):
            raise UsageError(
                f"perfscope.profile(...) decorates a function, not {type(func).__name__}; "
                "did you mean `with perfscope.profile(...):`?"
            )

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prof = self if self._state == "new" else self._clone()
            with prof:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def _clone(self) -> Profiler:
        return Profiler(
            self._path_arg, schedule=self.schedule, options=self.options, overwrite=self.overwrite,
            rank=self.rank, local_rank=self.local_rank, world_size=self.world_size,
        )

    # -- starting ----------------------------------------------------------------------------
    def _attach(self, recorder: Profiler) -> None:
        """Join a ``perfscope record`` recording instead of starting a second one."""
        self._attached = recorder
        self._state = "running"
        self.path = recorder.path
        recorder._note(
            f"perfscope.profile({str(self._path_arg)!r}) in the program ran under `perfscope record`; "
            f"it recorded into the record run {recorder.path} and its step() calls mark steps"
        )
        steps = recorder._steps
        if steps is not None and steps.last_ns is None and steps.count == 0:
            steps.last_ns = time.time_ns()  # step 0 begins here, not at interpreter start

    def _start(self) -> None:
        from perfscope.collectors.host.spans import HostSpans, Markers
        from perfscope.store import RankWriter

        if self.options.collector_options().cupti_decode == "inprocess" or (self.options.nccl and not self._injected):
            # pandas is imported on first use, maybe first at interpreter exit when imports
            # fail, by the in-process CUPTI decoder (pa.array) and by the NCCL collector's
            # reading at stop, which runs here unless `perfscope record` does it: load it now.
            # Nothing else of a recording needs it (the writer builds its columns from
            # buffers, perfscope.store.arrays): a job under `record` is spared ~33 MB of RSS.
            import pandas  # noqa: F401

        self._started_ns = time.time_ns()
        # Absolute now: the program may chdir (Hydra does) while the flusher keeps writing.
        self.path = Path(os.path.abspath(self.path if self.path is not None else _default_path()))
        self.run_id, self._created_run = join_or_create_run(
            self.path, rank=self.rank, world_size=self.world_size, run_id=self.run_id, source=self.source,
            injected=self._injected, overwrite=self.overwrite, collectors=self.options.collector_names(), note=self._note,
        )
        if self._created_run and self.schedule is not None:  # `perfscope trigger` reads it there
            from perfscope.store import update_run

            update_run(self.path, schedule=self.schedule.as_dict())
        self._writer = RankWriter(self.path, self.rank, flush_interval_s=self.options.flush_interval_s)
        self._spans = HostSpans()
        self._markers = Markers(os.getpid())
        self._steps = StepTracker(self.schedule, None if self._injected else self._started_ns, self._phase)
        self._spans.on = self._markers.on = self._steps.active
        if self.schedule is not None and self.schedule.on_demand:
            self._poller = RequestPoller(self.path)
        self._set = CollectorSet(self.options, self._context())
        # Under `perfscope record` the launcher runs the job-wide collectors for every rank.
        self._set.start(("process",) if self._injected else ("process", "job"))
        # Pausable window collectors start now even when the first window is far off, so
        # that opening it costs no start-up (and NVTX is routed to CUPTI before its first call).
        self._set.start(("window",), pausable_only=True)
        self._collecting = True
        self._phase(self._steps.phase)
        self._write_rank_meta("recording")
        self._flusher = Flusher(self.options.flush_interval_s, self._flush, self._note)
        self._flusher.start()

    def _context(self) -> CollectorContext:
        assert self.path is not None
        return CollectorContext(
            run_path=self.path, rank=self.rank, options=self.options.collector_options(), note=self._note,
            env=os.environ, writer=self._collector_writer(), host_spans=self._spans, on_step=self._on_optimizer_step,
            recording=lambda: self._state == "running" and not self._dead, facts=self._facts,
        )

    def _collector_writer(self) -> Any:
        """The rank's writer, behind a filter of warm-up rows when a schedule has warm-ups."""
        s, steps = self.schedule, self._steps
        if s is None or steps is None or not (s.warmup or s.on_demand):
            return self._writer
        return WarmupFilter(self._writer, steps.dropped_intervals)

    def _poll(self) -> None:
        """Queue the on-demand trigger requests that arrived (at a step boundary)."""
        if self._poller is not None and self._steps is not None:
            for req in self._poller.poll():
                self._steps.request(req["id"], req["steps"], req["warmup"], req["align"])

    def _on_optimizer_step(self, end_ns: int) -> None:
        if self._steps is not None and not self._dead:
            self._poll()
            self._steps.optimizer(end_ns)
            if self._gpu is None:
                self._gpu_info()

    def _gpu_info(self) -> dict[str, Any]:
        """This rank's GPU, read on the training thread once CUDA is up, then cached.

        The CUDA device is per-thread state: asked from the flusher thread, torch would
        name device 0 whatever device the training thread uses.
        """
        if self._gpu is None and threading.current_thread() is threading.main_thread():
            info = gpu_info()
            if info:
                self._gpu = info
        return dict(self._gpu or {})

    def _phase(self, phase: str) -> None:
        """The step that begins has phase ``phase``: window collectors run in warm-up and
        active steps and are paused (or stopped) in the others; host spans and markers are
        kept in active steps only."""
        if self._spans is None or self._set is None:
            return
        self._spans.on = self._markers.on = phase == ACTIVE
        if phase == ACTIVE and self._flusher is not None and self._steps is not None and self._steps.dropped_intervals():
            # A decoder in another process drops a warm-up's rows once the rank file gives its end.
            self._flusher.wake()
        if phase == OFF and self._collecting:
            self._collecting = False
            for error in self._set.close_window():
                self._note(error)
        elif phase != OFF and not self._collecting:
            self._collecting = True
            self._set.open_window()
        elif phase != OFF:
            self._set.start(("window",))  # the window collectors that cannot pause (a no-op once they run)

    # -- flushing --------------------------------------------------------------------------------
    def _drain_into_writer(self) -> None:
        for table, buf in (("host", self._spans), ("markers", self._markers), ("steps", self._steps)):
            if buf is None:
                continue
            data = buf.drain()
            if data:
                self._writer.append(table, data)

    def _flush(self) -> None:
        with self._flush_lock:
            if not self._dead and self._writer is not None:
                self._write_out("recording")

    def _write_out(self, status: str, reason: str | None = None) -> None:
        """Write what every buffer and collector holds, then the rank file (caller holds the lock)."""
        self._drain_into_writer()
        if self._set is not None:
            self._set.flush()
        self._writer.flush()
        self._write_rank_meta(status, reason=reason, final=status != "recording")

    # -- stopping ---------------------------------------------------------------------------------
    def _teardown(self, *, status: str, reason: str | None) -> list[str]:
        """Undo everything start() did, whatever state it reached; returns write errors."""
        errors: list[str] = []
        if self._flusher is not None:
            self._flusher.stop()
        for buf in (self._spans, self._markers):
            if buf is not None:
                buf.on = False
        if self._set is not None:
            errors += self._set.stop(("window", "process"))
        with self._flush_lock:
            if self._writer is not None and not self._dead:
                try:
                    self._drain_into_writer()
                    self._writer.close()
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{type(e).__name__}: {e}")
            if self._set is not None:
                if self._writer is not None and not self._dead and self._steps is not None and self._steps.windows:
                    # The job-wide decoder of CUPTI's segments reads the windows from the rank file.
                    self._write_rank_meta("recording")
                # After the writer: the job-wide collectors write their own tables (NCCL's).
                errors += self._set.stop(("job",))
            if self._writer is not None and not self._dead:
                try:
                    self._write_rank_meta(status if not errors else "incomplete", reason=reason, final=True)
                    if self._created_run:
                        from perfscope.store import update_run

                        assert self.path is not None
                        update_run(self.path, status=status, collectors=self.collectors)
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{type(e).__name__}: {e}")
        self._state = "stopped"
        with state.LOCK:
            if state.ACTIVE is self:
                state.set_active(None)
        return errors

    def _become_inert(self) -> None:
        """In a forked child: never write, never flush (the parent owns the run)."""
        self._dead = True
        self._state = "stopped"
        for buf in (self._spans, self._markers):
            if buf is not None:
                buf.on = False
                buf.clear()
        if self._set is not None:
            self._set.forget()

    # -- metadata ----------------------------------------------------------------------------------
    def _note(self, message: str) -> None:
        """Record a warning once: in the rank file, and as a Python warning in-process."""
        if message in self.warnings:
            return
        self.warnings.append(message)
        if not self._injected:
            # The launcher prints the warnings of every rank once at the end; in-process, warn now.
            try:
                warnings.warn(message, PerfscopeWarning, stacklevel=state.user_stacklevel())
            except Exception:  # noqa: BLE001 - `-W error`: this may run inside opt.step(), an import or the flusher
                pass

    def _write_rank_meta(self, status: str, *, reason: str | None = None, final: bool = False) -> None:
        from perfscope.store import write_rank_meta

        if self.path is None or self._dead:
            return
        info = rank_info(self, status, reason=reason, final=final)
        if not final and info == self._last_meta:
            return
        write_rank_meta(self.path, self.rank, info)
        self._last_meta = info


def _default_path() -> str:
    return f"perfscope-{time.strftime('%Y%m%d-%H%M%S')}.perfscope"


def profile(
    path: str | os.PathLike[str] | Callable[..., Any] | None = None,
    *,
    schedule: Schedule | tuple[int, int | None] | dict[str, Any] | str | None = None,
    cupti: bool = True,
    nccl: bool = True,
    nvml: bool = True,
    host_hooks: bool = True,
    flush_interval_s: float = 2.0,
    overwrite: bool = False,
) -> Any:
    """Record this process into the run directory ``path``.

    Args:
        path: the run directory (default ``perfscope-YYYYmmdd-HHMMSS.perfscope``). Every
            rank of a multi-process job passes the same path; each writes its own shard.
        schedule: which steps to record (None: every step). torch.profiler's cycle as a
            text, ``"wait=1,warmup=1,active=3,repeat=2"`` (repeat=0: until the end), or
            ``Schedule(wait=.., warmup=.., record=.., repeat=..)``; ``Schedule(skip=N,
            record=M)`` or ``(N, M)``: skip N steps, then record M; ``"on-demand"``: only
            the windows ``perfscope trigger`` opens. Between windows every collector is
            paused (CUPTI, the NCCL plugin, NVML, host spans) and the store gets no rows.
        cupti: capture GPU activity through CUPTI.
        nccl: load perfscope's NCCL profiler plugin (only effective when profiling starts
            before ``torch.distributed.init_process_group``).
        nvml: sample GPU metrics.
        host_hooks: record DataLoader waits, torch.distributed calls, optimizer steps and
            synchronize calls, and derive steps from optimizer steps.
        flush_interval_s: longest time recorded data stays in memory.
        overwrite: replace an existing run at ``path``.

    Returns:
        a :class:`Profiler` (use it with ``with``, as a decorator, or start()/stop()).
        Used bare as ``@perfscope.profile``, the decorated function.
    """
    opts = RecordOptions(cupti=cupti, nccl=nccl, nvml=nvml, host_hooks=host_hooks, flush_interval_s=flush_interval_s)
    if callable(path):
        return Profiler(None, schedule=schedule, options=opts, overwrite=overwrite)(path)
    return Profiler(path, schedule=schedule, options=opts, overwrite=overwrite)



__all__ = ["profile", "Profiler", "Schedule"]
