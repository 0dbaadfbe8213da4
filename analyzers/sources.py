"""The run-like objects analyzers read, as Protocols (the seam between store and analyzers).

:class:`perfscope.store.Run` (a run on disk) and :class:`perfscope.store.MemoryRun` (a run
an import still holds in memory) both satisfy them, and so does any object with the same
members (a test double, a reader of another format): analyzers name these Protocols, never
the store's classes, so the store can change how it reads without the analyzers knowing.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import pandas as pd


class RunLike(Protocol):
    """What :func:`~perfscope.analyzers.analyze_run` needs of a run: its metadata (run.json
    merged with the rank files, see :mod:`perfscope.store.meta`), its ranks, and its tables
    as DataFrames (columns and units: :mod:`perfscope.store.schema`)."""

    @property
    def meta(self) -> Mapping[str, Any]: ...

    @property
    def ranks(self) -> list[int]: ...

    def rank_meta(self, rank: int) -> Mapping[str, Any]:
        """Rank ``rank``'s metadata (empty when the rank wrote none)."""
        ...

    def table(self, name: str, ranks: Iterable[int] | None = None,
              columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Table ``name`` of ``ranks`` (default: all), the given ``columns`` (default: all)."""
        ...


@runtime_checkable
class ArrayRunLike(RunLike, Protocol):
    """A :class:`RunLike` that also reads a table as column arrays without building a
    DataFrame (the store's readers do; the analysis then uses it, for speed and memory)."""

    def arrays(self, name: str, ranks: Iterable[int] | None = None, columns: Sequence[str] | None = None,
               *, coded: bool = False) -> dict[str, Any]:
        """Table ``name`` as ``{column: array}`` (see ``perfscope.store.Run.arrays``)."""
        ...


class WindowSource(Protocol):
    """What timeline lanes read: a run (``perfscope.open_run``) or an in-memory run."""

    def window(self, table: str, rank: int, columns: Sequence[str] | None, t0_ns: int, t1_ns: int) -> pd.DataFrame:
        """The rows of ``table`` on ``rank`` overlapping ``[t0_ns, t1_ns)`` (see ``Run.window``)."""
        ...


__all__ = ["RunLike", "ArrayRunLike", "WindowSource"]
