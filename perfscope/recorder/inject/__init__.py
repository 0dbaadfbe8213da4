"""Recording a job without code changes: the process side of ``perfscope record``.

``perfscope record`` prepends :func:`site_dir` (the folder holding this package's
``sitecustomize.py``) to ``PYTHONPATH`` and sets ``PERFSCOPE_RUN_DIR`` and the options
(:mod:`perfscope.options`).  Every Python process of the job then runs :func:`bootstrap`
at start-up, which decides whether this process is a rank that records
(:func:`decide`) and, if so, starts a :class:`perfscope.recorder.profiler.Profiler` for it and
makes sure it is flushed however the process ends:

* normal exit and ``sys.exit``: ``atexit`` stops the profiler (rank status ``complete``);
* SIGTERM / SIGINT: the handler flushes, then chains to the handler that was there
  before (the program's own, or the default action, in which
  case the rank is marked ``incomplete`` and the signal re-raised so the exit status is
  what it would have been; Python's own SIGINT handler is left in place: its
  KeyboardInterrupt reaches atexit, which marks the rank ``incomplete`` when the
  interrupt was never caught, as the process then dies of SIGINT); when the main thread
  is stuck in native code and cannot run the handler, a watcher thread does it
  (:class:`_SignalWatch`);
* ``os._exit``: wrapped to stop the profiler first;
* SIGKILL: nothing can run, so the run keeps what the background flusher wrote, at most
  one flush interval old; the launcher then marks the rank ``incomplete``
  (:mod:`perfscope.launch`).

Which processes record (:func:`decide`):

* a process with ``RANK`` set (torchrun workers and other launchers; else Open MPI's,
  PMI's or Slurm's rank variable) records as that rank, unless the process that already
  records as that rank started it (a compile worker or other helper inherits
  ``PERFSCOPE_OWNER`` naming its rank);
* a process without ``RANK`` records as rank 0 if no process of the job records yet;
* never: launcher agents (``torchrun``, ``python -m torch.distributed.run``,
  ``accelerate``, ``deepspeed``), ``multiprocessing`` spawn/forkserver children
  (DataLoader workers with the spawn start method), children of a recording process
  without a ``RANK`` of their own.  Forked children (DataLoader workers on Linux) never
  run this code; :mod:`perfscope.recorder.state` makes them inert at fork.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from perfscope.options import (
    ENV_OWNER, RecordOptions, env_debug, env_local_rank, env_rank, env_run_dir, env_run_id, env_schedule,
)
from perfscope.recorder.inject._perfscope_decide import AGENT_MODULES, AGENT_PROGRAMS, decide

_real_exit = os._exit  # before bootstrap wraps it


def site_dir() -> str:
    """Return the folder ``perfscope record`` prepends to PYTHONPATH (holds sitecustomize.py)."""
    return str(Path(__file__).resolve().parent)


def _debug(message: str) -> None:
    if env_debug():
        sys.stderr.write(f"perfscope[{os.getpid()}]: {message}\n")


def bootstrap() -> Any:
    """Start recording this process if :func:`decide` says so (called from sitecustomize).

    Returns:
        the running Profiler, or None.  Never raises: a failure is reported on stderr and
        the program runs unrecorded.
    """
    try:
        ok, rank, why = decide(os.environ, getattr(sys, "orig_argv", sys.argv), os.getpid())
        _debug(f"{'recording' if ok else 'not recording'}: {why}; argv={getattr(sys, 'orig_argv', sys.argv)}")
        if not ok:
            return None
        explicit_rank = env_rank(os.environ) is not None
        os.environ[ENV_OWNER] = f"{rank if explicit_rank else '-'}:{os.getpid()}"
        return _start(rank)
    except Exception as e:  # noqa: BLE001 - never break the user's program
        sys.stderr.write(f"perfscope: recording disabled in process {os.getpid()}: {type(e).__name__}: {e}\n")
        return None


def _start(rank: int) -> Any:
    from perfscope.recorder.profiler import Profiler

    lr = env_local_rank()
    prof = Profiler(
        env_run_dir(),
        options=RecordOptions.from_env(),
        schedule=env_schedule(),
        rank=rank,
        local_rank=lr if lr is not None else 0,
        run_id=env_run_id(),
        source="record",
        injected=True,
    )
    prof.start()
    _install_exit_handlers(prof)
    return prof


def _install_exit_handlers(prof: Any) -> None:
    def at_exit() -> None:
        try:
            if prof.running:
                if _dying_of_keyboard_interrupt():
                    prof.stop(status="incomplete", reason="SIGINT (KeyboardInterrupt)")
                else:
                    prof.stop(status="complete")
        except Exception as e:  # noqa: BLE001 - the rank file already says incomplete; no traceback at exit
            _debug(f"stopping at exit failed: {type(e).__name__}: {e}")

    atexit.register(at_exit)

    real_exit = os._exit

    def _exit(code: int) -> None:  # os._exit skips atexit: flush first
        try:
            if prof.running:
                prof.stop(status="complete", reason="os._exit")
        except BaseException:  # noqa: BLE001
            pass
        real_exit(code)

    os._exit = _exit  # type: ignore[assignment]

    watch = _SignalWatch(prof)
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            previous = signal.getsignal(signum)
        except (ValueError, OSError):
            continue
        if previous is signal.SIG_IGN:
            continue  # the program ignores it; so do we
        if signum == signal.SIGINT and previous is signal.default_int_handler:
            # KeyboardInterrupt unwinds to atexit, which stops the profiler anyway; and code
            # such as asyncio.run() only installs its own Ctrl-C handling when it finds
            # Python's default handler in place, so replacing it would change the program.
            continue
        try:
            handler = _make_handler(prof, signum, previous, watch)
            signal.signal(signum, handler)
        except (ValueError, OSError):
            continue  # not the main thread, or not allowed: atexit still covers normal exits
        watch.watch(signum, fatal=previous in (signal.SIG_DFL, None), handler=handler)
    watch.start()


def _dying_of_keyboard_interrupt() -> bool:
    """True when the interpreter is exiting because a KeyboardInterrupt was never caught
    (it then kills itself with SIGINT after atexit).  The interpreter printed that
    exception through ``PyErr_Print``, which keeps it as ``sys.last_exc`` (3.12) /
    ``sys.last_value``, whatever ``sys.excepthook`` the program installed."""
    if sys.flags.interactive or hasattr(sys, "ps1"):
        return False  # the REPL keeps every exception it printed, and exits normally
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return isinstance(last, KeyboardInterrupt)


def _make_handler(prof: Any, signum: int, previous: Any, watch: _SignalWatch) -> Any:
    name = signal.Signals(signum).name

    def handler(sig: int, frame: Any) -> None:
        watch.handled(sig)
        if callable(previous):
            # The program's handler (or Python's KeyboardInterrupt) decides what happens;
            # make sure what was recorded so far is on disk first.
            try:
                prof.flush()
            except Exception:  # noqa: BLE001
                pass
            previous(sig, frame)
            return
        # Default action: the process is about to die by this signal.
        try:
            if prof.running:
                prof.stop(status="incomplete", reason=name)
        except Exception:  # noqa: BLE001
            pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    return handler


class _SignalWatch:
    """Keeps a Python signal handler from making the process unkillable.

    Python runs signal handlers on the main thread between bytecodes, so while the main
    thread waits inside native code (a TCPStore rendezvous, an NCCL hang) our SIGTERM
    handler would not run and the process, which used to die at once, would linger.  A
    daemon thread reads the signal numbers Python writes to its wakeup fd; when the
    main-thread handler has not run within ``GRACE_S``, it writes what was recorded (at
    most ``WRITE_TIMEOUT_S``) and, for a signal whose action was the default, restores
    that action and re-raises the signal so the process dies as it would have.  When the
    program already uses the wakeup fd (asyncio), nothing is installed.
    """

    GRACE_S = 1.0
    WRITE_TIMEOUT_S = 5.0

    def __init__(self, prof: Any) -> None:
        self.prof = prof
        self.fatal: dict[int, bool] = {}
        self._ours: dict[int, Any] = {}
        self._seen: dict[int, int] = {}
        self._handled: dict[int, int] = {}
        self._cond = threading.Condition()

    def watch(self, signum: int, *, fatal: bool, handler: Any = None) -> None:
        self.fatal[int(signum)] = fatal
        self._ours[int(signum)] = handler

    def handled(self, signum: int) -> None:
        with self._cond:
            self._handled[signum] = self._handled.get(signum, 0) + 1
            self._cond.notify_all()

    def start(self) -> None:
        if not self.fatal:
            return
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(r)
            os.close(w)
            return
        if old != -1:  # someone else's: give it back and do without
            signal.set_wakeup_fd(old)
            os.close(r)
            os.close(w)
            return
        if hasattr(os, "register_at_fork"):
            # A forked child (DataLoader worker, multiprocessing Pool) inherits the wakeup fd but
            # not this thread: its signals would reach the parent's watcher, which would then
            # kill the parent for a SIGTERM sent to the child.
            os.register_at_fork(after_in_child=lambda: self._after_fork_in_child(r, w))
        threading.Thread(target=self._run, args=(r,), name="perfscope-signals", daemon=True).start()

    def _after_fork_in_child(self, r: int, w: int) -> None:
        _forget_wakeup_fd(r, w)
        self._cond = threading.Condition()  # the watcher thread may have held it at fork

    def _run(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in self.fatal:
                    self._seen[signum] = self._seen.get(signum, 0) + 1
                    self._check(signum, self._seen[signum])

    def _check(self, signum: int, nth: int) -> None:
        with self._cond:
            if self._ours.get(signum) is not None and signal.getsignal(signum) is not self._ours[signum]:
                # The program installed its own handler since: what happens is its business
                # (e.g. checkpoint on SIGTERM and exit later), never ours to cut short.
                self._handled[signum] = self._handled.get(signum, 0) + 1
                return
            if self._cond.wait_for(lambda: self._handled.get(signum, 0) >= nth, timeout=self.GRACE_S):
                return  # the main thread handled it
        fatal = self.fatal[signum]
        reason = f"{signal.Signals(signum).name} while the main thread was blocked in native code"
        writer = threading.Thread(target=self._write, args=(fatal, reason), daemon=True)
        writer.start()
        writer.join(self.WRITE_TIMEOUT_S)
        if fatal:
            _die_by(signum)

    def _write(self, fatal: bool, reason: str) -> None:
        try:
            if fatal:
                self.prof.emergency_flush(reason)
            else:
                self.prof.flush()
        except Exception:  # noqa: BLE001
            pass


def _forget_wakeup_fd(r: int, w: int) -> None:
    """In a forked child: stop writing signal numbers into the parent's watcher pipe."""
    try:
        old = signal.set_wakeup_fd(-1)
        if old not in (-1, w):
            signal.set_wakeup_fd(old)  # the program's own (set after ours): keep it
    except (ValueError, OSError):
        pass
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def _die_by(signum: int) -> None:
    """Restore the default action of ``signum`` at the C level (any thread may) and raise it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal.restype = ctypes.c_void_p
        libc.signal(int(signum), None)  # SIG_DFL is the null handler
        os.kill(os.getpid(), signum)
    except Exception:  # noqa: BLE001
        pass
    time.sleep(1.0)
    _real_exit(128 + int(signum))  # the signal did not take: still leave the way it asked


__all__ = ["bootstrap", "decide", "site_dir", "AGENT_PROGRAMS", "AGENT_MODULES"]
