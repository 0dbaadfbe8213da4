"""Refactors leave every output unchanged: the CLI's analysis, report and comparison of each
committed fixture and shared trace equal the golden texts in ``tests/golden/expected``.

After an intended change of output, re-record with ``python -m tests.golden.outputs --write``
and review the diff of ``tests/golden/expected`` in the commit.
"""
from __future__ import annotations

import atexit
import difflib
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.golden import outputs as golden

_TMP = Path(tempfile.mkdtemp(prefix="golden-"))
atexit.register(shutil.rmtree, _TMP, True)
_CASES = dict(golden.cases(_TMP))


@pytest.mark.parametrize("name", sorted(_CASES))
def test_output_unchanged(name: str) -> None:
    if name.split("/")[1] == "shared" and not golden.SHARED.is_dir():
        pytest.skip(f"shared traces not present at {golden.SHARED}")
    path = golden.expected_path(name)
    assert path.exists(), f"no golden output for {name}: run python -m tests.golden.outputs --write"
    got = golden.stored_form(name, _CASES[name]())
    want = path.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "now", n=2))
        pytest.fail(f"output of {name} changed:\n{diff[:4000]}")
