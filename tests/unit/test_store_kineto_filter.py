"""The native pre-filter of Kineto imports (``perfscope/store/kineto/prefilter.c``).

The filter must drop only events no table keeps, copy everything else byte for byte,
refuse anything that is not strict JSON of the expected shape, and leave the import's
result (tables, row order, warnings, errors) exactly as without it.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from perfscope.errors import InputError
from kineto_checks import KINETO_FIXTURES, SHARED_NAMES, assert_identical_runs
from perfscope.store.kineto import decode, import_kineto, prefilter, read
from perfscope.store.kineto.classify import CPU_OP_PREFIXES, FILTER_RULES


def _built() -> str | None:
    """Build the library in place when the install did not; the reason when it cannot be."""
    if prefilter.library_path() is None:
        try:
            from perfscope.store.kineto import build

            build.build_in_place()
        except Exception as e:  # noqa: BLE001 - no compiler: nothing to test
            return f"the Kineto filter is not built and cannot be: {e}"
        prefilter._load_failed = False
    return None if prefilter.available() else "the Kineto filter library does not load"


_NOT_BUILT = _built()
if _NOT_BUILT is not None:  # pragma: no cover - the build is part of the install
    pytest.skip(_NOT_BUILT, allow_module_level=True)

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "kineto"


#: The importer's rules with the filter's by-name rule on (cpu_op events kept only by
#: name, as the importer kept them before the operators table): the rule tests below
#: exercise that part of the filter too; the importer's own rules: test_importer_rules.
RULES = FILTER_RULES._replace(by_name="cpu_op", prefixes=CPU_OP_PREFIXES)


def run(text: bytes | str, rules: prefilter.Rules = RULES, **kw: Any) -> prefilter.Filtered:
    """The filter on ``text`` with ``rules``."""
    return prefilter.run(text.encode() if isinstance(text, str) else text, rules, **kw)


def trace(*events: str, head: str = '"schemaVersion": 1', tail: str = "") -> str:
    """A trace text with these event texts."""
    parts = [head, '"traceEvents": [' + ", ".join(events) + "]", tail]
    return "{" + ", ".join(p for p in parts if p) + "}"


def kept_events(text: str) -> list[Any]:
    """The events of the filtered text (checking that it is JSON)."""
    r = run(text)
    assert r.error is None, (r.error, r.offset)
    return json.loads(bytes(r.text))["traceEvents"]


# -- the rule ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("event", "kept"),
    [
        ('{"ph": "X", "cat": "kernel", "name": "k"}', True),
        ('{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel"}', True),
        ('{"ph": "C", "cat": "perfscope_metric", "name": "sm"}', True),
        ('{"ph": "C", "cat": "kernel", "name": "k"}', False),  # kernels are kept as X only
        ('{"ph": "X", "cat": "perfscope_metric", "name": "sm"}', False),  # metrics as C only
        ('{"ph": "f", "cat": "ac2g", "name": "ac2g"}', False),
        ('{"ph": "s", "cat": "kernel", "name": "k"}', False),
        ('{"ph": "M", "name": "process_name"}', False),
        ('{"ph": "i", "cat": "kernel"}', False),
        ('{"ph": "X", "cat": "python_function", "name": "f"}', True),
        ('{"ph": "C", "cat": "python_function", "name": "f"}', False),
        ('{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler"}', False),
        ('{"ph": "X", "cat": "cpu_op", "name": "aten::add"}', False),
        ('{"ph": "X", "cat": "cpu_op", "name": "record_param_comms"}', True),
        ('{"ph": "X", "cat": "cpu_op", "name": "record_param_commsX"}', True),  # a prefix
        ('{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#12"}', True),
        ('{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep"}', False),
        ('{"ph": "X", "cat": "cpu_op", "name": ""}', False),
        ('{"ph": "X", "cat": "cpu_op"}', True),  # no name: unknown
        ('{"ph": "X", "cat": "cpu_op", "name": 5}', True),  # not text: unknown
        ('{"ph": "X", "cat": "cpu_op", "name": null}', True),
        ('{"ph": "X", "name": "k"}', True),  # no cat
        ('{"ph": "X", "cat": null}', True),
        ('{"ph": "X", "cat": 7}', True),
        ('{"cat": "kernel", "name": "k"}', True),  # no ph
        ('{"cat": "ac2g", "name": "k"}', False),  # no ph, but no table reads ac2g
        ('{}', True),
        # Escapes make a value unknown, which keeps the event.
        ('{"ph": "\\u0058", "cat": "ac2g"}', False),  # the cat alone drops it
        ('{"ph": "\\u0073", "cat": "kernel"}', True),
        ('{"ph": "X", "cat": "k\\u0065rnel"}', True),
        ('{"ph": "X", "cat": "cpu_op", "name": "aten::\\"add\\""}', True),
        ('{"ph": "X", "cat": "cpu_op", "name": "a\\\\b"}', True),
        # An escaped key might be ph, cat or name.
        ('{"p\\u0068": "s", "cat": "ac2g"}', True),
        ('{"ph": "X", "c\\u0061t": "ac2g"}', True),
        # A repeated key: which one counts is the decoder's business.
        ('{"ph": "s", "ph": "X", "cat": "kernel"}', True),
        ('{"ph": "X", "cat": "ac2g", "cat": "kernel"}', True),
        ('{"ph": "X", "cat": "cpu_op", "name": "aten::add", "name": "ProfilerStep#1"}', True),
        # Keys are compared whole.
        ('{"phase": "s", "ph": "X", "cat": "kernel", "category": "ac2g"}', True),
        ('{"ph": "X", "cats": "ac2g", "cat": "kernel"}', True),
    ],
)
def test_rule(event: str, kept: bool) -> None:
    assert kept_events(trace(event)) == ([json.loads(event)] if kept else [])


def test_importer_rules() -> None:
    """The importer keeps every operator and Python frame (the operators table), and no
    other cpu_op phase or unknown category."""
    events = ['{"ph": "X", "cat": "cpu_op", "name": "aten::add"}', '{"ph": "X", "cat": "cpu_op", "name": ""}',
              '{"ph": "X", "cat": "python_function", "name": "train.py(3): f"}',
              '{"ph": "i", "cat": "cpu_op", "name": "aten::add"}', '{"ph": "X", "cat": "Trace", "name": "t"}']
    r = run(trace(*events), FILTER_RULES)
    assert [e["name"] for e in json.loads(bytes(r.text))["traceEvents"]] == ["aten::add", "", "train.py(3): f"]


def test_nested_keys_do_not_count() -> None:
    """Only the event's own keys decide: "ph", "cat" and "name" in args (objects, arrays of
    objects, deeper) are just values."""
    events = [
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"ph": "s", "cat": "ac2g", "name": "aten::add"}}',
        '{"args": {"ph": "X", "cat": "kernel"}, "ph": "f", "cat": "ac2g"}',
        '{"ph": "X", "cat": "cpu_op", "args": {"x": [{"name": "ProfilerStep#1"}, [{"cat": "kernel"}]]}, "name": "aten::mm"}',
        '{"ph": "X", "args": {"a": {"b": {"c": {"ph": "M"}}}}, "cat": "gpu_memcpy", "name": "Memcpy HtoD"}',
    ]
    assert [e["cat"] for e in kept_events(trace(*events))] == ["kernel", "gpu_memcpy"]


def test_key_order_and_white_space_do_not_matter() -> None:
    events = [
        '{"name":"aten::add","cat":"cpu_op","ph":"X"}',
        '{\n\t"name" :\r\n "record_param_comms" ,"cat"\t:"cpu_op",  "ph"  :  "X"  }',
        '  {"ts": 1, "dur": 2.5, "cat": "kernel", "args": {}, "ph": "X", "pid": 0}  ',
    ]
    kept = kept_events(trace(*events))
    assert [e.get("name") for e in kept] == ["record_param_comms", None]


def test_kept_events_and_other_members_are_copied_byte_for_byte() -> None:
    head = '"schemaVersion" : 1,\n "deviceProperties": [{"id": 0, "name": "H200"}], "x": "\\u00e9\\"\\\\"'
    tail = '"traceName": "t.json",  "baseTimeNanoseconds": 1700000000000000000 \n'
    keep1 = '{"ph": "X",   "cat": "kernel", "name": "\\"k\\"",\n "args": {"grid": [1, 2, 3]}}'
    keep2 = '{"cat":"gpu_memset","ph":"X","name":"Memset (Device)","ts":1.5e3}'
    text = trace(keep1, '{"ph": "f", "cat": "ac2g"}', keep2, head=head, tail=tail)
    r = run(" \n" + text + "\n")
    expected = " \n{" + head + ', "traceEvents": [' + keep1 + "," + keep2 + "], " + tail + "}\n"
    assert bytes(r.text) == expected.encode()
    assert (r.events, r.kept) == (3, 2)


def test_text_with_non_ascii_is_copied_exactly() -> None:
    keep = '{"ph": "X", "cat": "kernel", "name": "k€rnel 🚀 \\ud83d\\ude80"}'
    text = trace('{"ph": "X", "cat": "cpu_op", "name": "ünïcode"}', keep)
    assert kept_events(text) == [json.loads(keep)]


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": []}',
        '{"schemaVersion": 1, "traceEvents": [ ]}',
        '{"traceEvents": [], "schemaVersion": 1}',
        '{"a": {"traceEvents": 5}, "traceEvents": [], "b": [{"traceEvents": 6}]}',
    ],
)
def test_traceevents_anywhere_in_the_root(text: str) -> None:
    r = run(text)
    # (White space inside the array is not copied.)
    assert r.error is None and bytes(r.text) == text.replace("[ ]", "[]").encode() and (r.events, r.kept) == (0, 0)


def test_traceevents_first_middle_and_last() -> None:
    events = ['{"ph": "X", "cat": "kernel"}', '{"ph": "X", "cat": "cpu_op", "name": "x"}']
    for text in (
        '{"traceEvents": [' + ", ".join(events) + '], "b": 1}',
        '{"a": [1, {"b": null}], "traceEvents": [' + ", ".join(events) + '], "c": true}',
        '{"a": false, "traceEvents": [' + ", ".join(events) + "]}",
    ):
        assert json.loads(bytes(run(text).text)) == {**json.loads(text), "traceEvents": [json.loads(events[0])]}


# -- refusals ---------------------------------------------------------------------------
EVENT = '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "args": {"a": [1, 2.5e-3, "x"]}}'


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "truncated"),
        ("   ", "truncated"),
        ("[1, 2]", "root"),
        ('"traceEvents"', "root"),
        ("{}", "no_events"),
        ('{"schemaVersion": 1}', "no_events"),
        ('{"traceEvents": null}', "events"),
        ('{"traceEvents": {}}', "events"),
        ('{"traceEvents": [], "traceEvents": []}', "events"),
        ('{"trace\\u0045vents": []}', "root"),
        ('{"traceEvents": [1]}', "event"),
        ('{"traceEvents": [[]]}', "event"),
        ('{"traceEvents": ["x"]}', "event"),
        ('{"traceEvents": [null]}', "event"),
        ('{"traceEvents": [{"ph": 5}]}', "shape"),
        ('{"traceEvents": [{"ph": null, "cat": "ac2g"}]}', "shape"),
        ('{"traceEvents": [{"ph": ["X"]}]}', "shape"),
        ('{"traceEvents": [{"ph": "f", "cat": ["ac2g"]}]}', "shape"),
        ('{"traceEvents": [{"ph": "f", "cat": {}}]}', "shape"),
        ('{"traceEvents": [{"ph": "f", "pid": [1]}]}', "shape"),
        ('{"traceEvents": [{"ph": "f", "pid": {"a": 1}}]}', "shape"),
        # Truncated anywhere.
        ('{"traceEvents": [' + EVENT, "truncated"),
        ('{"traceEvents": [' + EVENT[:-1], "truncated"),
        ('{"traceEvents": [' + EVENT[:30], "truncated"),
        ('{"traceEvents": [' + EVENT + "]", "truncated"),
        ('{"traceEvents": [{"ph": "X", "ts": 1', "truncated"),
        ('{"traceEvents": [{"ph": "X", "ts": 1.', "truncated"),
        ('{"traceEvents": [{"ph": "X", "ok": tr', "truncated"),
        ('{"traceEvents": [{"ph": "X", "s": "\\u00', "truncated"),
        ('{"traceEvents": [{"ph": "X", "s": "abc', "truncated"),
        # Not JSON.
        ('{"traceEvents": [' + EVENT + ",]}", "syntax"),
        ('{"traceEvents": [' + EVENT + " " + EVENT + "]}", "syntax"),
        ('{"traceEvents": [], }', "syntax"),
        ('{"traceEvents": []} x', "syntax"),
        ('{"traceEvents": []}{}', "syntax"),
        ("\ufeff{\"traceEvents\": []}", "root"),  # a byte-order mark
        ('{"traceEvents": [{"ph": "f", "a": 01}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": -}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": 1.}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": .5}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": 1e}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": +1}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": NaN}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": Infinity}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": tru}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": nul}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": True}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": [1 2]}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": {"b" 1}}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": {"b": 1,}}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": {1: 1}}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": \'x\'}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": "\\x"}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": "\\u12g4"}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": "tab\there"}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": "new\nline"}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", "a": "nul\x00"}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f" "cat": "ac2g"}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f", }]}', "syntax"),
        ('{"traceEvents": [{"ph" "f"}]}', "syntax"),
        ('{"traceEvents": [{ph: "f"}]}', "syntax"),
        ('{"traceEvents": [{"ph": "f"}] /* c */}', "syntax"),
        # What the decoders refuse, or would treat apart in a dropped event.
        ('{"traceEvents": [{"ph": "f", "a": "\\ud800"}]}', "utf8"),
        ('{"traceEvents": [{"ph": "f", "a": "\\udc00\\ud800"}]}', "utf8"),
        ('{"traceEvents": [{"ph": "f", "a": "\\ud800\\u0041"}]}', "utf8"),
        ('{"traceEvents": [{"ph": "f", "a": ' + "7" * 601 + "}]}", "number"),
        ('{"traceEvents": [{"ph": "f", "a": ' + "[" * 99 + "]" * 99 + "}]}", "depth"),
    ],
)
def test_refusals(text: str, error: str) -> None:
    r = run(text)
    assert (r.error, r.text) == (error, None)
    assert 0 <= r.offset <= len(text.encode())


@pytest.mark.parametrize(
    ("raw", "offset"),
    [
        (b'{"traceEvents": [{"ph": "f", "a": "\xff"}]}', 35),
        (b'{"traceEvents": [{"ph": "f", "a": "\xc0\x80"}]}', 35),  # overlong
        (b'{"traceEvents": [{"ph": "f", "a": "\xed\xa0\x80"}]}', 35),  # a surrogate
        (b'{"traceEvents": [{"ph": "f", "a": "\xf4\x90\x80\x80"}]}', 35),  # above U+10FFFF
        (b'{"traceEvents": [{"ph": "f", "a": "\xe2\x82"}]}', 35),  # cut short
    ],
)
def test_invalid_utf8_is_refused_where_it_is(raw: bytes, offset: int) -> None:
    r = run(raw)
    assert (r.error, r.offset) == ("utf8", offset)


def test_limits_are_inclusive() -> None:
    """600 digits and 100 levels (the root being 1) are still fine."""
    assert run('{"traceEvents": [{"ph": "f", "a": -' + "7" * 600 + "}]}").error is None
    assert run('{"traceEvents": [{"ph": "f", "a": 1.' + "7" * 5000 + "}]}").error is None
    assert run('{"traceEvents": [{"ph": "f", "a": ' + "[" * 97 + "]" * 97 + "}]}").error is None
    assert run('{"x": ' + "[" * 99 + "]" * 99 + ', "traceEvents": []}').error is None
    assert run('{"x": ' + "[" * 100 + "]" * 100 + ', "traceEvents": []}').error == "depth"


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="chunk_events"):
        run('{"traceEvents": []}', chunk_events=0)
    with pytest.raises(ValueError, match="rules"):
        prefilter.run(b'{"traceEvents": []}', prefilter.Rules({"a\nb": "X"}, "cpu_op", ("x",)))
    with pytest.raises(ValueError, match="bytes"):
        prefilter.run(bytearray(b'{"traceEvents": []}'), FILTER_RULES, in_place=True)  # type: ignore[arg-type]


# -- threads, in place, chunk counts ----------------------------------------------------
def big_trace(n: int, *, args: str = '{"External id": 7, "Ev Idx": 1}') -> bytes:
    """A Kineto-like trace of n events (> 2 MB for n >= 12000), one in four kept."""
    events = []
    for i in range(n):
        if i % 4 == 0:
            events.append(f'{{"ph": "X", "cat": "kernel", "name": "k{i}", "ts": {i}.5, "dur": 1, "args": {{"correlation": {i}}}}}')
        elif i % 4 == 1:
            events.append(f'{{\n    "ph": "X", "cat": "cpu_op", "name": "aten::op{i}", "pid": 1, "tid": 2,\n'
                          f'    "ts": {i}, "dur": 0.5,\n    "args": {args}\n  }}')
        elif i % 4 == 2:
            events.append(f'{{"ph": "f", "id": {i}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}')
        else:
            events.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": {{"correlation": {i}}}}}')
    return ('{"schemaVersion": 1, "traceEvents": [\n  ' + ",\n  ".join(events) + '\n], "traceName": "big"}').encode()


@pytest.mark.parametrize("args", ['{"External id": 7}', '{"x": [{"a": 1}, {"b": 2}], "y": [1, {"c": 3}]}'])
def test_two_threads_and_in_place_give_the_same_text(args: str) -> None:
    """The second thread starts at a guessed element; with arrays of objects in args the
    guess can be wrong, which the first thread must notice."""
    data = big_trace(40000, args=args)
    assert len(data) > 2 << 20
    one = run(data, threads=1)
    assert one.error is None and one.events == 40000 and one.kept == 20000 and not one.split
    two = run(data, threads=2)
    assert bytes(two.text) == bytes(one.text) and two.chunk_kept == one.chunk_kept
    assert two.split or "[{" in args  # (the guess may land in args holding ", {")
    copy = bytes(bytearray(data))  # a bytes object of our own, to be overwritten
    inplace = run(copy, threads=2, in_place=True)
    assert bytes(inplace.text) == bytes(one.text) and inplace.chunk_kept == one.chunk_kept


def test_wrong_split_guesses_are_caught() -> None:
    """Middle elements whose args hold ``, {``: a thread starting there would read nonsense."""
    inner = ", ".join('{"ph": "f", "cat": "ac2g"}' for _ in range(90000))
    text = ('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "args": {"x": [' + inner
            + ']}}, {"ph": "X", "cat": "cpu_op", "name": "n"}, {"ph": "X", "cat": "kernel"}]}')
    assert len(text) > 2 << 20
    expected = text.replace(', {"ph": "X", "cat": "cpu_op", "name": "n"}, ', ",").encode()
    for threads in (1, 2):
        r = run(text, threads=threads)
        assert (r.events, r.kept, r.chunk_kept, r.split) == (3, 2, [2], False)
        assert bytes(r.text) == expected


def test_errors_in_either_half_are_found_with_two_threads() -> None:
    data = big_trace(40000)
    for at in (len(data) // 4, 3 * len(data) // 4):
        i = data.index(b'"ph": "f"', at)
        bad = data[:i] + b'"ph": 5  ' + data[i + 9:]
        for threads in (1, 2):
            r = run(bad, threads=threads)
            assert (r.error, r.offset) == ("shape", i + 6)


def test_chunk_counts_follow_the_original_events() -> None:
    events = ['{"ph": "X", "cat": "kernel"}'] * 3 + ['{"ph": "f", "cat": "ac2g"}'] * 4 + ['{"ph": "X", "cat": "kernel"}']
    assert run(trace(*events), chunk_events=3).chunk_kept == [3, 0, 1]
    assert run(trace(*events), chunk_events=8).chunk_kept == [4]
    assert run(trace(*events), chunk_events=1).chunk_kept == [1, 1, 1, 0, 0, 0, 0, 1]
    assert run(trace()).chunk_kept == []


def test_chunk_counts_by_category() -> None:
    cats = list(FILTER_RULES.cats)
    events = ['{"ph": "X", "cat": "kernel"}', '{"ph": "X", "cat": "cuda_driver"}', '{"ph": "X"}',
              '{"ph": "f", "cat": "ac2g"}', '{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3"}']
    r = run(trace(*events), chunk_events=3)
    expected = [[0] * (len(cats) + 1) for _ in range(2)]
    expected[0][cats.index("kernel")] = expected[0][cats.index("cuda_driver")] = expected[0][len(cats)] = 1
    expected[1][cats.index("cpu_op")] = 1
    assert r.chunk_counts == [tuple(row) for row in expected] and r.chunk_kept == [3, 1]


def test_chunks_are_joined_only_where_no_order_changes() -> None:
    cats = ["a", "b", "cuda_runtime", "cuda_driver", "user_annotation", "gpu_user_annotation", "cpu_op", "python_function"]

    def row(**n: int) -> list[int]:
        return [n.get(c, 0) for c in cats] + [n.get("unknown", 0)]

    sizes = read.chunk_sizes
    assert sizes([row(a=2), row(b=3), row(a=1)], cats, 10) == [6]
    assert sizes([row(a=2), row(b=3), row(a=6)], cats, 10) == [5, 6]  # the limit
    assert sizes([row(a=1), row(unknown=1), row(a=1)], cats, 10) == [1, 1, 1]
    assert sizes([row(cuda_driver=1), row(cuda_runtime=1)], cats, 10) == [1, 1]
    assert sizes([row(cuda_runtime=1), row(cuda_driver=1), row(cuda_driver=2)], cats, 10) == [4]
    assert sizes([row(gpu_user_annotation=1), row(a=1), row(user_annotation=1)], cats, 10) == [2, 1]
    assert sizes([row(user_annotation=1), row(gpu_user_annotation=1)], cats, 10) == [2]
    assert sizes([row(cpu_op=1), row(user_annotation=1)], cats, 10) == [1, 1]
    assert sizes([row(python_function=1), row(cpu_op=1)], cats, 10) == [1, 1]
    assert sizes([row(cpu_op=1), row(python_function=1)], cats, 10) == [2]
    assert sizes([row(), row(), row(a=1)], cats, 10) == [1]
    assert sizes([], cats, 10) == []


# -- the import with and without the filter ---------------------------------------------
def import_both(files: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, filtered: bool = True,
                **kw: Any) -> tuple[Path, Path, Any, Any]:
    """Import ``files`` with the filter (checking that each file's filtered text was, or
    with ``filtered`` false was not, the one decoded) and without; return both runs and
    results."""
    a, b = tmp_path / "filtered", tmp_path / "whole"
    used: list[bool] = []
    decode_kept = read._decode_kept

    def recording(*args: Any) -> Any:
        trace = decode_kept(*args)
        used.append(trace is not None)
        return trace

    monkeypatch.setattr(read, "_decode_kept", recording)
    ra = import_kineto(files, a, **kw)
    assert used == [filtered] * len(files)
    monkeypatch.setattr(prefilter, "ENABLED", False)
    rb = import_kineto(files, b, **kw)
    assert len(used) == len(files)  # (not called with the filter off)
    monkeypatch.setattr(prefilter, "ENABLED", True)
    return a, b, ra, rb


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_shared_traces_import_the_same_with_and_without_the_filter(
        shared_kineto: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    path = shared_kineto / f"{name}.json.gz"
    if not path.is_file():
        pytest.skip(f"{path.name} not present")
    assert_identical_runs(*import_both([path], tmp_path, monkeypatch))




def test_the_fixtures_are_found() -> None:
    assert len(KINETO_FIXTURES) >= 14 and FIXTURES / "single_gpu_absolute.json" in KINETO_FIXTURES


@pytest.mark.parametrize("path", KINETO_FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_fixtures_import_the_same_with_and_without_the_filter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    assert_identical_runs(*import_both([path], tmp_path, monkeypatch))


@pytest.mark.parametrize("prefix", ["kineto/ddp_rank", "scenarios/kineto/straggler_rank", "scenarios/kineto/comm_heavy_rank"])
def test_multi_rank_fixtures_import_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    files = sorted((FIXTURES.parent).glob(f"{prefix}*.json*"))
    assert len(files) >= 2
    assert_identical_runs(*import_both(files, tmp_path, monkeypatch))


@pytest.mark.parametrize(
    ("first", "second", "table"),
    [
        ("gpu_user_annotation", "user_annotation", "markers"),
        ("cuda_driver", "cuda_runtime", "api"),
        ("cpu_op", "user_annotation", "steps"),
    ],
)
def test_the_filter_is_used_and_row_order_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   first: str, second: str, table: str) -> None:
    """Some tables are joined per chunk from two categories (markers: host then GPU ones):
    the filtered events must go to the builders in chunks of the original's boundaries, or
    the rows come in another order."""
    calls: list[int] = []
    real = prefilter.run

    def counting(data: bytes, rules: prefilter.Rules, **kw: Any) -> prefilter.Filtered:
        result = real(data, rules, **kw)
        calls.append(result.kept)
        return result

    monkeypatch.setattr(prefilter, "run", counting)
    monkeypatch.setattr(decode, "CHUNK_EVENTS", 4)
    names = ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"] if table == "steps" else ["x1", "x2", "x3"]

    def event(cat: str, name: str, ts: int) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 2, "ts": ts, "dur": 1, "args": {"correlation": ts}}

    events = [event(first, names[0], 1)]
    events += [event("Trace", f"dropped{i}", 2 + i) for i in range(5)]
    events += [event(second, names[1], 10), event(first, names[2], 11)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    a, b, ra, rb = import_both([path], tmp_path, monkeypatch)
    assert calls == [3]  # once, with the filter on
    assert pq.read_table(a / table / "rank=0").column("name").to_pylist() == names
    assert_identical_runs(a, b, ra, rb)


def test_big_files_are_filtered_in_place_and_read_again_on_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = big_trace(2000)
    assert len(data) >= read._IN_PLACE_BYTES
    good = tmp_path / "good.json.gz"
    good.write_bytes(gzip.compress(data))
    (tmp_path / "g").mkdir()
    assert_identical_runs(*import_both([good], tmp_path / "g", monkeypatch))
    # Cut short: the text was already overwritten when the filter found it.
    bad = tmp_path / "bad.json"
    bad.write_bytes(data[:-3000])
    with pytest.raises(InputError) as filtered:
        import_kineto(bad, tmp_path / "b1")
    monkeypatch.setattr(prefilter, "ENABLED", False)
    with pytest.raises(InputError) as whole:
        import_kineto(bad, tmp_path / "b2")
    assert str(filtered.value) == str(whole.value) and "not valid JSON" in str(whole.value)


def test_a_pipe_is_never_filtered_in_place(tmp_path: Path) -> None:
    """A trace read from a pipe (`<(zcat trace.json.gz)`) cannot be read a second time, so
    a big one is filtered into a buffer of its own: here the filtered text cannot be used
    (no Kineto header key: the original's first events decide) and the original decodes."""
    import os
    import threading

    data = big_trace(2000).replace(b'"schemaVersion": 1, ', b"")
    assert len(data) >= read._IN_PLACE_BYTES
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)

    done = threading.Event()

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(data)
        # A second read of the pipe gets end-of-file (an empty trace) instead of hanging.
        while not done.wait(0.01):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader yet
                pass

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        result = import_kineto(fifo, tmp_path / "run")
    finally:
        done.set()
        writer.join()
    assert result.rows[0]["kernels"] == 500 and result.rows[0]["api"] == 500


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}, ',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]} trailing',
        '[{"ph": "X"}]',
        '{"schemaVersion": 1}',
        '{"traceEvents": 3}',
        '{"schemaVersion": 1, "traceEvents": [1, 2]}',
        '{"schemaVersion": 1, "traceEvents": [{"ph": "f", "cat": "ac2g"}, {"ph": 5, "cat": "kernel"}]}',
        '{"schemaVersion": 1, "traceEvents": [{"ph": "f", "cat": "ac2g", "a": "\\ud800"}]}',
        '{"schemaVersion": 1, "traceEvents": [{"ph": "f", "cat": "ac2g", "a": ' + "1" * 5000 + "}]}",
        '{"schemaVersion": 1, "traceEvents": [{"ph": "f", "cat": "ac2g", "a": ' + "[" * 2000 + "]" * 2000 + "}]}",
        # No Kineto header key: only the first events' categories say whether it is Kineto.
        '{"traceEvents": [{"ph": "X", "cat": "my_app", "name": "x", "ts": 1, "dur": 1}]}',
        '{"traceEvents": [{"ph": "f", "cat": "my_app"}, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}]}',
    ],
)
def test_errors_read_the_same_with_and_without_the_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)

    def outcome(out: str) -> str:
        try:
            result = import_kineto(path, tmp_path / out)
        except (InputError, RecursionError) as e:
            return f"{type(e).__name__}: {e}"
        return f"ok {result.rows} {result.warnings}"

    with_filter = outcome("a")
    monkeypatch.setattr(prefilter, "ENABLED", False)
    assert with_filter == outcome("b")


def test_traces_without_a_kineto_header_get_the_same_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check looks at the first events' categories, dropped ones included (cpu_op, flows)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2, "dur": 1}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert_identical_runs(*import_both([path], tmp_path, monkeypatch, filtered=False))


def test_no_library_means_the_whole_decode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefilter, "_lib", None)
    monkeypatch.setattr(prefilter, "_load_failed", True)
    assert not prefilter.available()
    result = import_kineto(FIXTURES / "ddp_rank0.json.gz", tmp_path / "r")
    assert result.total("kernels") > 0
    monkeypatch.setenv("PERFSCOPE_KINETO_FILTER", "0")
    monkeypatch.setattr(prefilter, "_load_failed", False)
    assert not prefilter.available()
