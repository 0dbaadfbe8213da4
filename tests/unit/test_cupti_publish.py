"""A CUPTI decoder killed at any step of publishing a batch: recover yields every record once.

The sink writes segments (no CUPTI: records fed with ps_feed_plain); a decoder publishes
them and is "killed" (an exception nothing catches) at one step of
:mod:`perfscope.collectors.cupti.publish`: while staging, before or after the journal line,
between linking a part into the run and listing it in the manifest, between the parts,
between retiring the segments, before removing the stage.  Then more segments arrive and
``perfscope recover`` (:func:`decoder.decode_run`) decodes what is left.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from perfscope.collectors.cupti import decoder, publish, segments
from perfscope.store import integrity, open_run
from perfscope.store.meta import check_output
from perfscope.store.writer import RankWriter
from tests.unit.test_cupti_segments import _feed, writing  # noqa: F401 - the module's fixtures
from tests.unit.test_cupti_sink import sink  # noqa: F401

# (kernel names, first start) per segment; "a" in the last one is named by the first's strings
SEGMENTS = [([b"a", b"b"], 10_000), ([b"c"], 20_000), ([b"d", b"a"], 30_000)]
LATE = ([b"e", b"a"], 40_000)  # written after the kill
OFFSET = 7


class Killed(BaseException):
    """The decoder process dies here (nothing catches a BaseException on the way out)."""


def _expected(segs: list[tuple[list[bytes], int]]) -> list[tuple[str, int]]:
    return sorted((n.decode(), start + 1000 * i + OFFSET) for names, start in segs for i, n in enumerate(names))


def _kill_at(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, nth: int, after: bool) -> list[int]:
    """Make the ``nth`` call of ``owner.name`` raise Killed (``after``: once it has run)."""
    real = getattr(owner, name)
    calls = [0]

    def dying(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == nth and not after:
            raise Killed(name)
        out = real(*args, **kwargs)
        if calls[0] == nth:
            raise Killed(name)
        return out

    monkeypatch.setattr(owner, name, dying)
    return calls


KILLS = {
    "staging": (RankWriter, "append", 2, False),
    "before the journal line": (publish, "_append_line", 1, False),
    "after the journal line": (publish, "_append_line", 1, True),
    # (the stage's own writer lists the batch's two staged parts first: calls 1 and 2)
    "part linked, not listed": (integrity.ManifestWriter, "add", 3, False),
    "part listed, staged name kept": (integrity.ManifestWriter, "add", 3, True),
    "second part linked, not listed": (integrity.ManifestWriter, "add", 4, False),
    "parts in, no segment retired": (publish, "retire", 1, False),
    "one segment retired": (publish, "retire", 1, True),
    "segments retired, stage kept": (publish, "_remove_stage", 1, False),
}



def _decoder_over_segments(sink, run):  # noqa: ANN001, ANN202 - test helper
    """Write :data:`SEGMENTS` through ``sink``; return rank 0's decoder, its lock held."""
    for names, start in SEGMENTS:
        _feed(sink, names, start)
        sink.segments_cycle()
    dec = decoder.RankDecoder(run, 0)
    assert dec.acquire()
    return dec


@pytest.mark.parametrize("kill", list(KILLS))
def test_recover_after_a_decoder_killed_mid_publish_yields_every_record_once(writing, kill: str,  # noqa: F811
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    sink, folder = writing  # noqa: F811
    run = folder.parents[1]
    # GIVEN a decoder killed at one step of publishing its batch
    dec = _decoder_over_segments(sink, run)
    calls = _kill_at(monkeypatch, *KILLS[kill])
    with pytest.raises(Killed):
        dec.decode_pending()
    assert calls[0] == KILLS[kill][2]
    staged = list((folder / publish.STAGE).glob("*/*/rank=0/part-*.parquet"))
    moved = list(run.glob("*/rank=0/part-*.parquet"))
    assert (len(staged), len(moved)) == {  # the kill landed where it is said to
        "staging": (0, 0), "before the journal line": (2, 0), "after the journal line": (2, 0),
        "part linked, not listed": (2, 1), "part listed, staged name kept": (2, 1),
        "second part linked, not listed": (1, 2),
    }.get(kill, (0, 2))
    dec.close()  # the process is gone: so is its lock
    monkeypatch.undo()
    # ... the run can still be replaced (the journal and stages are perfscope's own files)
    check_output(run, force=True)
    # WHEN more segments arrive and perfscope recover decodes what is left
    _feed(sink, *LATE)
    sink.segments_cycle()
    decoder.decode_run(run, final=True)
    # THEN every kernel and API record is in the run exactly once, every part listed
    r = open_run(run)
    got = sorted(zip(r.table("kernels")["name"].astype(str), r.table("kernels")["start_ns"]))
    assert got == _expected([*SEGMENTS, LATE])
    assert len(r.table("api")) == len(got)
    findings = r.verify()
    assert findings.ok and not findings.warnings, (findings.errors, findings.warnings)
    assert not folder.exists()  # journal, stages, decoded segments and lock all gone


def test_a_restarted_decoder_finishes_the_journaled_batch_without_decoding_it_again(
        writing, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    sink, folder = writing  # noqa: F811
    run = folder.parents[1]
    dec = _decoder_over_segments(sink, run)
    _kill_at(monkeypatch, publish, "retire", 1, False)
    with pytest.raises(Killed):
        dec.decode_pending()
    dec.close()
    monkeypatch.undo()
    (batch,) = publish.read_journal(folder / publish.JOURNAL)
    assert [n for n, _ in batch.segments] == [s.path.name for s in segments.list_segments(folder)[0]]
    # the child decoder of the next flush (same rank, new process) takes over
    again = decoder.RankDecoder(run, 0)
    assert again.acquire()
    assert again.decode_pending() == 0  # the journaled batch is finished, not decoded again
    assert again.records == {} and all(s.decoded for s in segments.list_segments(folder)[0])
    _feed(sink, *LATE)
    sink.segments_cycle()
    assert again.decode_pending() == 1  # a new segment naming "a" from the first batch's strings
    again.finish()
    got = sorted(zip(open_run(run).table("kernels")["name"].astype(str), open_run(run).table("kernels")["start_ns"]))
    assert got == _expected([*SEGMENTS, LATE])


def test_a_journal_line_cut_short_is_no_batch(tmp_path: Path) -> None:
    j = tmp_path / publish.JOURNAL
    publish._append_line(j, '{"batch": "1-0", "segments": [["1-00000000.cupti", true]]}')
    with open(j, "ab") as f:
        f.write(b'{"batch": "1-1", "segm')  # killed while appending
    assert [(b.key, b.segments) for b in publish.read_journal(j)] == [("1-0", (("1-00000000.cupti", True),))]
    assert os.path.getsize(j) > 0


def test_finish_completes_a_batch_a_failed_call_left_staged(writing, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # GIVEN the launcher's decoder whose last call failed after journaling (a full disk, say):
    # the launcher notes the error and finishes the rank all the same
    sink, folder = writing  # noqa: F811
    run = folder.parents[1]
    dec = _decoder_over_segments(sink, run)
    _kill_at(monkeypatch, integrity.ManifestWriter, "add", 4, False)
    with pytest.raises(Killed):
        dec.decode_pending(final=True)
    monkeypatch.undo()
    dec.finish()
    # THEN the batch was published whole, once, and nothing is left to recover
    got = sorted(zip(open_run(run).table("kernels")["name"].astype(str), open_run(run).table("kernels")["start_ns"]))
    assert got == _expected(SEGMENTS)
    assert not folder.exists()
