"""In-process recording: :func:`profile`, :class:`Profiler` and :func:`annotate`.

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
* ``host``: DataLoader waits, torch.distributed barriers and collectives, optimizer steps
  and ``torch.cuda.synchronize`` calls (:mod:`perfscope.collectors.host`);
* ``markers``: every :func:`annotate` range (source ``perfscope``), also emitted as an
  NVTX range so Nsight and CUPTI see it;
* GPU activity through CUPTI, NVML samples and the NCCL plugin's collectives when those
  collectors are present and the machine has a GPU; otherwise a warning says what is
  missing and the run still holds the host data.

Data reaches disk every ``flush_interval_s`` from a background thread, so a process
killed outright loses at most that much.  Hooks are removed whenever the profiler stops,
including when an exception escapes the ``with`` block or ``start()`` itself fails.

Under ``perfscope record`` a profiler is already running (started by the injected
``sitecustomize``); a ``perfscope.profile(...)`` in the user's code then records nothing
itself and forwards its ``step()`` calls to the recording one.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, TypeVar

from perfscope._steps import Schedule, StepTracker
from perfscope.errors import AlreadyProfilingError, CollectorError, CuptiUnavailableError, RunExistsError, UsageError
from perfscope.options import RecordOptions, env_local_rank, env_rank, env_world_size

F = TypeVar("F", bound=Callable[..., Any])

NCCL_RAW_DIR = "nccl_plugin"  # where the NCCL plugin writes its files inside a run (collectors.nccl.default_dir)


class PerfscopeWarning(UserWarning):
    """A collector could not record something; the run goes on without it."""


_ACTIVE: Profiler | None = None
_ACTIVE_LOCK = threading.RLock()


def active_profiler() -> Profiler | None:
    """Return the profiler recording in this process, if any."""
    return _ACTIVE


def _optional_module(name: str) -> tuple[ModuleType | None, str | None]:
    """Import ``name`` if its file exists; return (module, None) or (None, why not)."""
    try:
        if importlib.util.find_spec(name) is None:
            return None, f"{name} is not part of this perfscope build"
    except (ImportError, ValueError) as e:
        return None, f"{name} cannot be found ({e})"
    try:
        return importlib.import_module(name), None
    except CuptiUnavailableError as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - a broken optional collector must not stop recording
        return None, f"{name} failed to import ({type(e).__name__}: {e})"


def _default_path() -> str:
    return f"perfscope-{time.strftime('%Y%m%d-%H%M%S')}.perfscope"


class Profiler:
    """Records one process (one rank) of a training job into a run directory.

    Create it with :func:`profile`.  Attributes of interest once started: ``path`` (the
    run directory), ``rank``, ``warnings`` (what could not be recorded).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        schedule: Schedule | tuple[int, int | None] | dict[str, Any] | None = None,
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
        self.collectors: list[str] = []
        self.dropped_events: dict[str, int] = {}
        self._injected = injected
        self._state = "new"  # new -> running -> stopping -> stopped
        self._attached: Profiler | None = None
        self._created_run = False
        self._undo: list[tuple[str, Callable[[], Any]]] = []
        self._writer: Any = None
        self._spans: Any = None
        self._markers: Any = None
        self._steps: StepTracker | None = None
        self._cupti: Any = None
        self._nvml: Any = None
        self._device_started = False
        self._collector_stats: dict[str, Any] = {}
        self._flush_lock = threading.RLock()
        self._stop_event = threading.Event()
        self._flusher: threading.Thread | None = None
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

    def start(self) -> Profiler:
        """Start recording and return self.

        Raises:
            AlreadyProfilingError: this profiler, or another one in this process, is running.
            RunExistsError: the run directory holds data and ``overwrite`` is false.
            UsageError: this profiler already recorded once (create a new one).
        """
        global _ACTIVE
        with _ACTIVE_LOCK:
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
            current = _ACTIVE
            if current is not None:
                if current._injected and not self._injected:
                    self._attach(current)
                    return self
                raise AlreadyProfilingError(
                    f"perfscope is already profiling this process into {current.path}; only one profile() can record "
                    "at a time. Remove the inner perfscope.profile(...) (nested `with` blocks or a decorated function "
                    "called inside another profile), or call stop() on the first one before starting another"
                )
            _ACTIVE = self
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
        self._steps.explicit(time.time_ns())
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
        :mod:`perfscope.collectors.inject`): hooks and collectors stay as they are.
        """
        if self._attached is not None or self._state != "running" or self._dead:
            return
        if not self._flush_lock.acquire(timeout=timeout_s):
            return
        try:
            self._drain_into_writer()
            if self._cupti is not None:
                self._cupti.flush()
            self._writer.flush()
            self._write_rank_meta("incomplete", reason=reason, final=True)
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
        with _ACTIVE_LOCK:  # atexit, a signal handler and the user may all call stop()
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

        # pyarrow imports pandas on its first pa.array(); the collectors call it, maybe
        # first at interpreter exit, when that import fails. `import perfscope` no longer
        # loads pandas (importing a trace never needs it), so a recording loads it here.
        import pandas  # noqa: F401

        self._started_ns = time.time_ns()
        if self.path is None:
            self.path = Path(_default_path())
        # Absolute now: the program may chdir (Hydra does) while the flusher keeps writing.
        self.path = Path(os.path.abspath(self.path))
        self._join_or_create_run()
        self._writer = RankWriter(self.path, self.rank, flush_interval_s=self.options.flush_interval_s)
        self._spans = HostSpans()
        self._markers = Markers(os.getpid())
        self._steps = StepTracker(self.schedule, None if self._injected else self._started_ns, self._window)
        self._spans.on = self._markers.on = self._steps.active
        self.collectors.append("steps")
        if self.options.host_hooks:
            self.collectors.append("host")
            from perfscope.collectors.host.patching import when_imported

            self._undo.append(("torch import hook", when_imported("torch", self._install_torch_hooks)))
        if self.options.nccl and not self._injected:
            self._configure_nccl()
        if self._steps.active:
            self._start_device_collectors()
        self._write_rank_meta("recording")
        self._flusher = threading.Thread(target=self._flush_loop, name="perfscope-flush", daemon=True)
        self._flusher.start()

    def _join_or_create_run(self) -> None:
        from perfscope.store import create_run

        assert self.path is not None
        world = self.world_size or 1
        if self._injected:
            # The launcher created run.json; join it (or create it if run by hand).
            create_run(self.path, source="record", run_id=self.run_id, world_size=self.world_size, command=list(sys.orig_argv))
            return
        if world > 1 and self.run_id is None:
            # Every rank must name the same run: derive the id from what the launcher gives
            # all of them and nothing else: the rendezvous id (a fresh uuid with
            # --standalone, the job's --rdzv-id across nodes), else Slurm's or MPI's job id,
            # else the parent's pid (one node), plus the job and the path.
            self.run_id = _job_run_id(self.path)
        if world > 1 and self.rank != 0:
            self._wait_for_run(self.run_id)
            return
        if self.run_id is not None:
            self._replace_same_id_run()
        meta = create_run(
            self.path, command=list(sys.orig_argv), source=self.source, world_size=self.world_size or 1,
            run_id=self.run_id, environment=self._environment(), collectors=self.options.collector_names(),
            overwrite=self.overwrite,
        )
        self.run_id = meta["run_id"]
        self._created_run = True

    def _replace_same_id_run(self) -> None:
        """Rank 0 alone creates the run: a run.json with our id is left from an earlier job
        that reused the rendezvous id, never one to join."""
        from perfscope.store.meta import RUN_JSON, read_json

        assert self.path is not None
        p = Path(self.path) / RUN_JSON
        if not p.is_file() or read_json(p).get("run_id") != self.run_id:
            return
        if not self.overwrite:
            raise RunExistsError(f"{self.path} already holds a run; choose another path or pass overwrite=True to replace it")
        p.unlink()  # create_run(overwrite=True) then clears the rest

    def _wait_for_run(self, run_id: str | None, timeout_s: float = 120.0) -> None:
        """Rank > 0 of an in-process multi-rank job: wait until rank 0 has created the run."""
        from perfscope.store.meta import RUN_JSON, read_json

        assert self.path is not None
        deadline = time.monotonic() + timeout_s
        p = Path(self.path) / RUN_JSON
        while time.monotonic() < deadline:
            if p.is_file():
                try:
                    if read_json(p).get("run_id") == run_id:
                        return
                except Exception:  # noqa: BLE001 - being written; try again
                    pass
            time.sleep(0.05)
        raise RunExistsError(
            f"rank {self.rank} waited {timeout_s:.0f} s for rank 0 to create the run {self.path}; make sure every rank "
            "calls perfscope.profile() with the same path (rank 0 too), or pass overwrite=True if an old run is there"
        )

    def _environment(self) -> dict[str, Any]:
        # The doctor's facts *and* check results: the analyzers' rules read the checks.
        mod, _ = _optional_module("perfscope.doctor")
        if mod is None:
            return {}
        try:
            snap = mod.environment_for_run()
            return snap if isinstance(snap, dict) else {}
        except Exception as e:  # noqa: BLE001
            self._note(f"environment snapshot failed ({type(e).__name__}: {e})")
            return {}

    def _install_torch_hooks(self, _torch: ModuleType) -> None:
        """Attach the torch host hooks (called once torch is imported; must never raise)."""
        if self._dead or self._state != "running":
            return
        from perfscope.collectors.host import dataloader, distributed, optimizer, sync

        for name, install in (
            ("dataloader", lambda: dataloader.install(self._spans)),
            ("distributed", lambda: distributed.install(self._spans)),
            ("optimizer", lambda: optimizer.install(self._spans, self._on_optimizer_step)),
            ("sync", lambda: sync.install(self._spans)),
        ):
            try:
                self._undo.append((f"{name} hooks", install()))
            except Exception as e:  # noqa: BLE001 - a torch version we do not know: keep the rest
                self._note(f"could not hook torch {name} ({type(e).__name__}: {e}); those host spans are missing")

    def _on_optimizer_step(self, end_ns: int) -> None:
        if self._steps is not None and not self._dead:
            self._steps.optimizer(end_ns)
            if self._gpu is None:
                self._gpu_info()

    def _gpu_info(self) -> dict[str, Any]:
        """This rank's GPU, read on the training thread once CUDA is up, then cached.

        The CUDA device is per-thread state: asked from the flusher thread, torch would
        name device 0 whatever device the training thread uses.
        """
        if self._gpu is None and threading.current_thread() is threading.main_thread():
            from perfscope._rankinfo import gpu_info

            info = gpu_info()
            if info:
                self._gpu = info
        return dict(self._gpu or {})

    def _configure_nccl(self) -> None:
        mod, _ = _optional_module("perfscope.collectors.nccl")
        if mod is None or not hasattr(mod, "configure_env"):
            return
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
                self._note(
                    "torch.distributed was initialised before perfscope.profile() started, so NCCL cannot load the "
                    "profiler plugin: collectives are not recorded. Start profiling before init_process_group, "
                    "or use `perfscope record`"
                )
                return
        except Exception:  # noqa: BLE001
            pass
        assert self.path is not None
        env = dict(os.environ)
        try:
            notes = mod.configure_env(env, str(Path(self.path) / NCCL_RAW_DIR))
        except Exception as e:  # noqa: BLE001
            self._note(f"NCCL profiler plugin not configured ({type(e).__name__}: {e})")
            return
        changed = {k: os.environ.get(k) for k, v in env.items() if os.environ.get(k) != v}
        for k in changed:
            os.environ[k] = env[k]

        def restore() -> None:
            for k, old in changed.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old

        self._undo.append(("NCCL plugin variables", restore))
        for n in notes or []:
            self._note(str(n))
        if not notes and env.get("NCCL_PROFILER_PLUGIN"):
            self.collectors.append("nccl")

    def _window(self, on: bool) -> None:
        """The schedule's window opened or closed."""
        if self._spans is None:
            return
        self._spans.on = self._markers.on = on
        if on:
            self._start_device_collectors()
        else:
            self._stop_device_collectors()

    def _start_device_collectors(self) -> None:
        if self._device_started:
            return
        self._device_started = True
        if self.options.cupti:
            self._start_cupti()
        if self.options.nvml:
            self._start_nvml()

    def _no_gpu(self, reason: str | None) -> None:
        from perfscope._rankinfo import gpu_present

        if not gpu_present():
            self._note("no NVIDIA GPU found on this machine: recorded host data only (steps, DataLoader waits, "
                       "barriers, optimizer steps, markers)")
        else:
            self._note(f"GPU activity is not recorded: {reason}")

    def _start_cupti(self) -> None:
        mod, why = _optional_module("perfscope.collectors.cupti")
        if mod is None:
            self._no_gpu(why)
            return
        try:
            ok, reason = mod.available()
        except Exception as e:  # noqa: BLE001
            ok, reason = False, f"{type(e).__name__}: {e}"
        if not ok:
            self._no_gpu(reason)
            return
        if "NVTX_INJECTION64_PATH" not in os.environ:
            # NVTX reads this on its first call; set it before that so annotate() ranges reach CUPTI.
            try:
                added = [k for k, v in mod.nvtx_injection_env().items() if os.environ.setdefault(k, v) == v]
                if added:
                    # Child processes started after stop() must not load CUPTI as their NVTX injection.
                    self._undo.append(("NVTX injection variable", lambda: [os.environ.pop(k, None) for k in added]))
            except Exception:  # noqa: BLE001 - markers still land through perfscope's own rows
                pass
        try:
            collector = mod.CuptiCollector(self._writer)
            collector.start()
        except CuptiUnavailableError as e:
            self._note(f"GPU activity is not recorded: {e}")
            return
        except Exception as e:  # noqa: BLE001
            self._note(f"the CUPTI collector failed to start ({type(e).__name__}: {e}); recording continues without GPU capture")
            return
        self._cupti = collector
        self.collectors.append("cupti")

    def _start_nvml(self) -> None:
        mod, _ = _optional_module("perfscope.collectors.host.nvml")
        if mod is None:
            return
        try:
            sampler = mod.NvmlSampler(self._writer, interval_s=0.1)
            if getattr(sampler, "available", True) is False:
                return  # no NVML here: the no-GPU warning (if any) already says so
            sampler.start()
        except Exception as e:  # noqa: BLE001
            self._note(f"NVML sampling failed to start ({type(e).__name__}: {e}); no GPU metrics")
            return
        self._nvml = sampler
        self.collectors.append("nvml")

    def _stop_device_collectors(self) -> list[str]:
        errors: list[str] = []
        if self._cupti is not None:
            cupti, self._cupti = self._cupti, None
            try:
                stats = cupti.stop()
                self._collector_stats["cupti"] = stats
                self._collector_stats["cupti_clock_offset_ns"] = int(getattr(cupti, "clock_offset_ns", 0) or 0)
                for w in getattr(cupti, "warnings", None) or []:
                    self._note(str(w))
                dropped = _dropped_from(stats)
                if dropped:
                    self.dropped_events["cupti"] = self.dropped_events.get("cupti", 0) + dropped
                    self._note(f"CUPTI dropped {dropped} records (buffers full); raise the buffer size or record fewer steps")
            except Exception as e:  # noqa: BLE001
                errors.append(f"CUPTI stop failed: {type(e).__name__}: {e}")
        if self._nvml is not None:
            nvml, self._nvml = self._nvml, None
            try:
                stats = nvml.stop()
                if isinstance(stats, dict):
                    self._collector_stats["nvml"] = stats
            except Exception as e:  # noqa: BLE001
                errors.append(f"NVML stop failed: {type(e).__name__}: {e}")
        return errors

    # -- flushing --------------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        while not self._stop_event.wait(self.options.flush_interval_s):
            try:
                self._flush()
            except Exception as e:  # noqa: BLE001 - a failed flush must not kill the job
                self._note(f"a periodic flush failed ({type(e).__name__}: {e})")

    def _drain_into_writer(self) -> None:
        for table, buf in (("host", self._spans), ("markers", self._markers), ("steps", self._steps)):
            if buf is None:
                continue
            data = buf.drain()
            if data:
                self._writer.append(table, data)

    def _flush(self) -> None:
        with self._flush_lock:
            if self._dead or self._writer is None:
                return
            self._drain_into_writer()
            if self._cupti is not None:
                try:
                    self._cupti.flush()
                except Exception as e:  # noqa: BLE001
                    self._note(f"CUPTI flush failed ({type(e).__name__}: {e})")
            self._writer.flush()
            self._write_rank_meta("recording")

    # -- stopping ---------------------------------------------------------------------------------
    def _teardown(self, *, status: str, reason: str | None) -> list[str]:
        """Undo everything start() did, whatever state it reached; returns write errors."""
        global _ACTIVE
        errors: list[str] = []
        self._stop_event.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=10)
        if self._spans is not None:
            self._spans.on = False
        if self._markers is not None:
            self._markers.on = False
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except Exception as e:  # noqa: BLE001
                errors.append(f"removing {what} failed: {type(e).__name__}: {e}")
        errors += self._stop_device_collectors()
        with self._flush_lock:
            if self._writer is not None and not self._dead:
                try:
                    self._drain_into_writer()
                    self._writer.close()
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{type(e).__name__}: {e}")
                self._ingest_nccl()
                try:
                    self._write_rank_meta(status if not errors else "incomplete", reason=reason, final=True)
                    if self._created_run:
                        from perfscope.store import update_run

                        assert self.path is not None
                        update_run(self.path, status=status, collectors=self.collectors)
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{type(e).__name__}: {e}")
        self._state = "stopped"
        with _ACTIVE_LOCK:
            if _ACTIVE is self:
                _ACTIVE = None
        return errors

    def _ingest_nccl(self) -> None:
        """In-process runs: turn this rank's plugin files into the collectives table.

        Only what the plugin has written by now is there (it writes its file as it goes
        and at communicator teardown); ``perfscope record`` reads the files after the job.
        """
        if self._injected or "nccl" not in self.collectors or self.path is None:
            return
        raw = Path(self.path) / NCCL_RAW_DIR
        mod, _ = _optional_module("perfscope.collectors.nccl")
        if mod is None or not hasattr(mod, "ingest_dir"):
            return
        try:
            if hasattr(mod, "flush_in_process"):
                mod.flush_in_process()  # write what the plugin still holds in memory
            if not raw.is_dir() or not any(raw.iterdir()):
                return
            mod.ingest_dir(str(raw), str(self.path), ranks=[self.rank])
            if hasattr(mod, "summarize_dir"):
                extra = mod.summarize_dir(str(raw)).get(self.rank, {})
                for k, v in (extra.get("dropped_events") or {}).items():
                    self.dropped_events[k] = self.dropped_events.get(k, 0) + int(v)
                if extra.get("nccl_plugin"):
                    self._collector_stats["nccl_plugin"] = extra["nccl_plugin"]
        except Exception as e:  # noqa: BLE001
            self._note(f"reading the NCCL plugin's files failed ({type(e).__name__}: {e}); no collectives table")

    def _become_inert(self) -> None:
        """In a forked child: never write, never flush (the parent owns the run)."""
        self._dead = True
        self._state = "stopped"
        for buf in (self._spans, self._markers):
            if buf is not None:
                buf.on = False
                buf.clear()
        self._cupti = None
        self._nvml = None

    # -- metadata ----------------------------------------------------------------------------------
    def _note(self, message: str) -> None:
        """Record a warning once: in the rank file, and as a Python warning in-process."""
        if message in self.warnings:
            return
        self.warnings.append(message)
        if not self._injected:
            # The launcher prints the warnings of every rank once at the end; in-process, warn now.
            try:
                warnings.warn(message, PerfscopeWarning, stacklevel=_user_stacklevel())
            except Exception:  # noqa: BLE001 - `-W error`: this may run inside opt.step(), an import or the flusher
                pass

    def _write_rank_meta(self, status: str, *, reason: str | None = None, final: bool = False) -> None:
        from perfscope._rankinfo import versions
        from perfscope.store import write_rank_meta

        if self.path is None or self._dead:
            return
        info: dict[str, Any] = {
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "source": self.source,
            "status": status,
            "started_ns": self._started_ns,
            "argv": list(sys.orig_argv),
            "gpu": self._gpu_info(),
            "versions": versions(),
            "clock_offset_ns": int(self._collector_stats.get("cupti_clock_offset_ns", 0)
                                   or getattr(self._cupti, "clock_offset_ns", 0) or 0),
            "collectors": list(self.collectors),
            "dropped_events": dict(self.dropped_events),
            "warnings": list(self.warnings),
        }
        if self.schedule is not None:
            info["schedule"] = {"skip": self.schedule.skip, "record": self.schedule.record}
        if self._steps is not None:
            info["steps_source"] = self._steps.mode
        if final:
            info["stopped_ns"] = time.time_ns()
            if reason:
                info["stop_reason"] = reason
            if self._error:
                info["error"] = self._error
            if self._writer is not None:
                info["rows_written"] = dict(self._writer.rows_written)
            if self._collector_stats:
                info["collector_stats"] = {k: v for k, v in self._collector_stats.items() if k != "cupti_clock_offset_ns"}
            if self.schedule is not None and self._steps is not None and self._steps.count < self.schedule.skip:
                self.warnings.append(
                    f"the schedule skips {self.schedule.skip} steps but only {self._steps.count} were seen: nothing was recorded"
                )
                info["warnings"] = list(self.warnings)
        if not final and info == self._last_meta:
            return
        write_rank_meta(self.path, self.rank, info)
        self._last_meta = info


def _job_run_id(path: str | os.PathLike[str]) -> str:
    """The run id every rank of this job derives alike (see _join_or_create_run)."""
    rdzv = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if rdzv not in ("", "none"):
        job = rdzv
    else:
        # srun and mpirun start the ranks of each node from a different parent, so the
        # parent's pid names the job only on one node: prefer the launcher's job id.
        ids = [os.environ.get(v, "") for v in ("SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")]
        job = "job-" + "/".join(ids) if any(ids) else f"agent-{os.getppid()}"
    key = "|".join([
        job, os.environ.get("SLURM_JOB_ID", ""), os.environ.get("MASTER_ADDR", ""),
        os.environ.get("MASTER_PORT", ""), str(Path(path).resolve()),
    ])
    return hashlib.sha1(key.encode()).hexdigest()[:32]


def _user_stacklevel() -> int:
    """The warnings.warn stacklevel of the first frame outside perfscope (the user's call)."""
    import perfscope.collectors

    ours = (str(Path(__file__).resolve().parent), *(str(Path(p).resolve()) for p in perfscope.collectors.__path__))
    frame = sys._getframe(1)
    level = 1
    while frame is not None and (frame.f_code.co_filename.startswith(ours) or "importlib" in frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _dropped_from(stats: Any) -> int:
    """Sum whatever dropped-record counters a collector's stats dict reports."""
    if not isinstance(stats, dict):
        return 0
    total = 0
    for k, v in stats.items():
        if "drop" in str(k).lower():
            if isinstance(v, bool):
                continue
            if isinstance(v, (int, float)):
                total += int(v)
            elif isinstance(v, dict):
                total += sum(int(x) for x in v.values() if isinstance(x, (int, float)) and not isinstance(x, bool))
    return total


def _after_fork_in_child() -> None:
    global _ACTIVE
    p = _ACTIVE
    if p is not None:
        p._become_inert()
    _ACTIVE = None


if hasattr(os, "register_at_fork"):
    # DataLoader workers (fork start method) inherit the patched hooks and buffers: make
    # them record nothing, since the parent process owns this rank's shard.
    os.register_at_fork(after_in_child=_after_fork_in_child)


def profile(
    path: str | os.PathLike[str] | Callable[..., Any] | None = None,
    *,
    schedule: Schedule | tuple[int, int | None] | dict[str, Any] | None = None,
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
        schedule: ``Schedule(skip=N, record=M)`` or ``(N, M)``: skip N warm-up steps, then
            record M steps (None: record everything).
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


# -- annotate ------------------------------------------------------------------------------------
_time_ns = time.time_ns
_nvtx_resolved = False
_nvtx_push: Callable[[str], Any] | None = None
_nvtx_pop: Callable[[], Any] | None = None


def _resolve_nvtx() -> None:
    """Pick the NVTX backend once: the nvtx package, else torch.cuda.nvtx, else none."""
    global _nvtx_resolved, _nvtx_push, _nvtx_pop
    try:
        import nvtx  # type: ignore[import-not-found]

        domain = nvtx.get_domain("perfscope")
        attrs: dict[str, Any] = {}

        def push(name: str) -> None:
            a = attrs.get(name)
            if a is None:
                a = domain.get_event_attributes(message=name)
                if len(attrs) < 10_000:  # names are few; never let the cache grow without bound
                    attrs[name] = a
            domain.push_range(a)

        _nvtx_push, _nvtx_pop = push, domain.pop_range
        _nvtx_resolved = True
        return
    except Exception:  # noqa: BLE001 - no nvtx package: try torch's
        pass
    torch = sys.modules.get("torch")
    if torch is None:
        return  # torch may come later; resolve again next time
    try:
        if hasattr(torch._C, "_nvtx"):
            _nvtx_push, _nvtx_pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    except Exception:  # noqa: BLE001
        pass
    _nvtx_resolved = True


class _Annotation:
    """A named range: context manager and decorator (see :func:`annotate`)."""

    __slots__ = ("name", "_starts")

    def __init__(self, name: str) -> None:
        self.name = name
        self._starts: list[int] = []

    def __enter__(self) -> _Annotation:
        if not _nvtx_resolved:
            _resolve_nvtx()
        if _nvtx_push is not None:
            _nvtx_push(self.name)
        self._starts.append(_time_ns())
        return self

    def __exit__(self, *exc: object) -> None:
        end = _time_ns()
        start = self._starts.pop() if self._starts else end
        if _nvtx_pop is not None:
            _nvtx_pop()
        p = _ACTIVE
        if p is not None and p._markers is not None:
            p._markers.add_span(start, end, self.name)

    def __call__(self, func: F) -> F:
        name = self.name

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _nvtx_resolved:
                _resolve_nvtx()
            if _nvtx_push is not None:
                _nvtx_push(name)
            start = _time_ns()
            try:
                return func(*args, **kwargs)
            finally:
                end = _time_ns()
                if _nvtx_pop is not None:
                    _nvtx_pop()
                p = _ACTIVE
                if p is not None and p._markers is not None:
                    p._markers.add_span(start, end, name)

        return wrapper  # type: ignore[return-value]


def annotate(name: str | Callable[..., Any]) -> Any:
    """Mark a named range: an NVTX range (domain ``perfscope``) and a ``markers`` row.

    Use as ``with perfscope.annotate("forward"): ...`` or ``@perfscope.annotate("forward")``
    (bare ``@perfscope.annotate`` names the range after the function).  Works with or
    without a running profiler (then it is only an NVTX range, visible to Nsight).

    Returns:
        a context manager/decorator; the decorated function when used bare.
    """
    if type(name) is str:  # the common case first: annotate sits on hot paths
        return _Annotation(name)
    if callable(name):
        return _Annotation(getattr(name, "__qualname__", getattr(name, "__name__", "function")))(name)
    if not isinstance(name, str):
        raise UsageError(f"annotate() takes the range's name as a str, not {type(name).__name__}")
    return _Annotation(name)


__all__ = ["profile", "annotate", "Profiler", "Schedule", "PerfscopeWarning", "active_profiler"]
