"""The background thread that writes a recording rank to disk every flush interval."""
from __future__ import annotations

import threading
from collections.abc import Callable


class Flusher:
    """Calls ``flush`` every ``interval_s`` on a daemon thread until :meth:`stop`.

    A failed flush becomes a ``note`` and the thread keeps going: losing one write must
    not kill the training job.
    """

    def __init__(self, interval_s: float, flush: Callable[[], None], note: Callable[[str], None]) -> None:
        self.interval_s = interval_s
        self._flush = flush
        self._note = note
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread."""
        self._thread = threading.Thread(target=self._loop, name="perfscope-flush", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Flush now rather than at the end of the interval (returns at once)."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread and wait for a flush in progress (not when called from the thread)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._flush()
            except Exception as e:  # noqa: BLE001 - a failed flush must not kill the job
                self._note(f"a periodic flush failed ({type(e).__name__}: {e})")


__all__ = ["Flusher"]
