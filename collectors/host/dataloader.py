"""Time the training loop spends waiting on ``torch.utils.data.DataLoader``.

Two spans of kind ``dataloader_wait`` land in the ``host`` table:

* ``DataLoader.__next__``: each ``next()`` on a DataLoader iterator, i.e. the time the
  loop blocked for its next batch (with ``num_workers=0`` that includes loading the batch
  in this process; with workers it is the wait for a worker's result);
* ``DataLoader.__iter__``: creating the iterator, which starts the worker processes when
  ``persistent_workers`` is off (a cost paid at every epoch).
"""
from __future__ import annotations

from collections.abc import Callable

from perfscope.collectors.host.patching import Patches
from perfscope.collectors.host.spans import DATALOADER_WAIT, HostSpans, timed


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
    patches.replace(base_iter, "__next__", timed(base_iter.__next__, spans, DATALOADER_WAIT, "DataLoader.__next__"))
    patches.replace(dl.DataLoader, "__iter__", timed(dl.DataLoader.__iter__, spans, DATALOADER_WAIT, "DataLoader.__iter__"))
    return patches.restore


__all__ = ["install"]
