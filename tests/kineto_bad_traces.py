"""Small Kineto traces with one bad value each, for the import's refusal tests and the fuzzer.

:func:`trace` writes a three-event trace (a step annotation, a launch, a kernel) whose
values can be replaced one at a time; :data:`REFUSED` maps a case name to (its text, a
fragment of the one-line error every route must give).
"""
from __future__ import annotations


def trace(ts: str = "1733126405002458.2", dur: str = "310.0", root: str = "",
          kernel_args: str = '{"device": 0, "stream": 7, "correlation": 5}', cat: str = '"kernel"',
          step: str = '"ProfilerStep#3"', rank: str = "0") -> bytes:
    """The JSON text of a minimal Kineto trace; each argument is the JSON text of one value
    (``root`` is inserted as members of the root object, each followed by a comma)."""
    text = (
        f'{{"schemaVersion": 1, "distributedInfo": {{"rank": {rank}, "world_size": 1}}, {root}"traceEvents": ['
        f'{{"ph": "X", "cat": "user_annotation", "name": {step}, "pid": 1, "tid": 1, "ts": 1733126405002000, "dur": 1000}},'
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1733126405002400.5,'
        ' "dur": 5, "args": {"correlation": 5, "cbid": 211}},'
        f'{{"ph": "X", "cat": {cat}, "name": "k", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, "args": {kernel_args}}}'
        ']}'
    )
    return text.encode("latin-1")  # (latin-1: a "\xff" in an argument stays one invalid UTF-8 byte)


#: name -> (trace text, fragment of the error message): every route refuses these.
REFUSED: dict[str, tuple[bytes, str]] = {
    "ts_exponent_huge": (trace(ts="1e999000"), "traceEvents[2]: ts 1e999000 is out of range"),
    "ts_39_digits": (trace(ts="1" * 39), "traceEvents[2]: ts 1111"),
    "ts_700_digits": (trace(ts="9" * 700), "(700 chars) is out of range"),
    "ts_beyond_int64_ns": (trace(ts="1e17"), "traceEvents[2]: ts 1e17 is out of range"),
    "dur_beyond_int64_ns": (trace(dur="92233720368547758"), "traceEvents[2]: dur 92233720368547758 is out of range"),
    "dur_nan_text": (trace(dur='"NaN"'), "traceEvents[2]: dur NaN is not a finite number"),
    "base_int64_max": (trace(root='"baseTimeNanoseconds": 9223372036854775807, '),
                       "baseTimeNanoseconds 9223372036854775807 is not an integer within"),
    "args_nested_100000_deep": (trace(kernel_args='{"device": ' + "[" * 100000 + "]" * 100000 + "}"), "nested too deeply"),
    "cat_object": (trace(cat="{}"), "traceEvents[2].cat: {} is not text"),
    "args_invalid_utf8": (trace(kernel_args='{"device": 0, "stream": "\xff"}'),
                          "traceEvents[2].args: cannot be read (Invalid UTF-8"),
    "int32_column_out_of_range": (trace(kernel_args='{"device": 0, "registers per thread": 99999999999}'),
                                  "traceEvents[2].args.registers per thread: 99999999999 is out of range"),
    "step_number_huge": (trace(step='"ProfilerStep#' + "9" * 30 + '"'), "traceEvents[0].name: step number 9"),
    "two_trace_events_members": (trace(root='"traceEvents": [], '), "has 2 traceEvents members"),
    "two_json_documents": (trace() + trace(), "holds more than one JSON document"),
}
