"""Time the training loop spends waiting on ``torch.utils.data.DataLoader``.

Two spans of kind ``dataloader_wait`` land in the ``host`` table:

* ``DataLoader.__next__``: each ``next()`` on a DataLoader iterator, i.e. the time the
  loop blocked for its next batch (with ``num_workers=0`` that includes loading the batch
  in this process; with workers it is the wait for a worker's result);
* ``DataLoader.__iter__``: creating the iterator, which starts the worker processes when
  ``persistent_workers`` is off (a cost paid at every epoch).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from perfscope.collectors.host.patching import Patches
from perfscope.collectors.host.spans import DATALOADER_WAIT, HostSpans

_time_ns = time.time_ns


def install(spans: HostSpans) -> Callable[[], None]:
    """Patch the DataLoader so that waits are recorded into ``spans``.

    Returns:
        a function that removes the patches.

    Raises:
        ImportError: torch is not installed.
    """
    from torch.utils.data import dataloader as dl

    patches = Patches()
    base_iter = dl._BaseDataLoaderIter
    orig_next = base_iter.__next__
    orig_iter = dl.DataLoader.__iter__

    def __next__(self: Any) -> Any:
        if not spans.on:
            return orig_next(self)
        t0 = _time_ns()
        try:
            return orig_next(self)
        finally:
            spans.add(t0, DATALOADER_WAIT, "DataLoader.__next__")

    def __iter__(self: Any) -> Any:
        if not spans.on:
            return orig_iter(self)
        t0 = _time_ns()
        try:
            return orig_iter(self)
        finally:
            spans.add(t0, DATALOADER_WAIT, "DataLoader.__iter__")

    __next__.__wrapped__ = orig_next  # type: ignore[attr-defined]
    __iter__.__wrapped__ = orig_iter  # type: ignore[attr-defined]
    patches.replace(base_iter, "__next__", __next__)
    patches.replace(dl.DataLoader, "__iter__", __iter__)
    return patches.restore


__all__ = ["install"]
