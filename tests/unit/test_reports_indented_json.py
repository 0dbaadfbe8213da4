"""``perfscope.reports.indented_json.dumps`` writes what ``json.dumps(indent=...)`` writes."""
from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfscope.reports.indented_json import dumps

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    | st.dictionaries(st.integers() | st.booleans() | st.none(), inner, max_size=3),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(documents, st.sampled_from([(1, True), (2, False)]))
def test_the_text_is_json_dumps_byte_for_byte(doc: Any, options: tuple[int, bool]) -> None:
    indent, ascii_only = options
    assert dumps(doc, indent, ascii_only) == json.dumps(doc, indent=indent, allow_nan=False, ensure_ascii=ascii_only)


@pytest.mark.parametrize("bad", [math.nan, {"rows": [{"x": math.inf}]}, [1, [-math.inf]]])
def test_nan_and_infinity_are_refused_as_json_dumps_refuses_them(bad: Any) -> None:
    with pytest.raises(ValueError):
        dumps(bad)
