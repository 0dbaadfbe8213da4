"""A seeded fuzzer of the Kineto import (issue 20): mutated traces either import or are
refused with a PerfscopeError (no other exception, no hang), and the native route and
the msgspec route (and, for every fourth case, the unfiltered one) agree: the same tables,
or the same error.

``PERFSCOPE_FUZZ_CASES`` (default 2000, ~30 s on two cores) sets how many cases run;
``PERFSCOPE_FUZZ_SEED`` the first seed (a failure names the seed that reproduces it).
"""
from __future__ import annotations

import gzip
import json
import os
import random
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from perfscope.errors import PerfscopeError
from perfscope.store.kineto import importer, native, prefilter
from perfscope.store.kineto.read import read_trace
from tests.kineto_bad_traces import trace

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "kineto"
CASES = int(os.environ.get("PERFSCOPE_FUZZ_CASES", "2000"))
FIRST_SEED = int(os.environ.get("PERFSCOPE_FUZZ_SEED", "0"))
#: Seconds one import of one case may take (they take ~10 ms; 1e999000 once took 26 s).
CASE_SECONDS = 10

#: Values put in place of a trace's values.
NASTY = [
    b"1e999000", b"-1e999000", b"1" * 39, b"9" * 700, b'"NaN"', b"NaN", b"Infinity", b"-0", b"1e-400",
    b"{}", b"[]", b"null", b"true", b'""', b'"\xff"', b'"\\ud800"', b"[" * 3000 + b"]" * 3000,
    b"9223372036854775807", b"-9223372036854775808", b"18446744073709551616", b"4611686018427387.904",
    b"1.0000000001", b"0.0005", b'"1733126405002458.2"', b'"ProfilerStep#99999999999999999999"',
    b'"ProfilerStep#7"', b'"kernel"', b'"cpu_op"', b'"gpu_memcpy"', b'"cuda_sync"', b'"X"', b'"C"', b'"M"',
    b"-5", b"2147483648", b'{"rank": "zero"}', b'{"device": 1e300}', b'[1, 2, 3]',
]
_VALUE = re.compile(rb'(?<=: )(-?\d[\d.eE+-]*|"(?:[^"\\]|\\.)*"|true|false|null|\{\}|\[\])')


def _seeds() -> list[bytes]:
    full = json.loads((FIXTURES / "single_gpu_absolute.json").read_text())
    small = dict(full, traceEvents=full["traceEvents"][:60])
    relative = json.loads(trace())
    relative["baseTimeNanoseconds"] = 1733126405000000000
    for e in relative["traceEvents"]:
        e["ts"] = round(e["ts"] - 1733126405000000, 3)
    return [trace(), json.dumps(small).encode(), json.dumps(relative).encode(),
            json.dumps(relative, indent=1).encode()]


def mutate(text: bytes, rng: random.Random) -> bytes:
    """One to three random edits of ``text``."""
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        spans = [m.span() for m in _VALUE.finditer(text)]
        if kind < 0.55 and spans:
            a, b = rng.choice(spans)
            text = text[:a] + rng.choice(NASTY) + text[b:]
        elif kind < 0.65:
            i = rng.randrange(len(text))
            text = text[:i] + bytes([rng.randrange(256)]) + text[i + 1:]
        elif kind < 0.72:
            a = rng.randrange(len(text))
            text = text[:a] + text[a + rng.randint(1, 40):]
        elif kind < 0.79:
            a = rng.randrange(len(text))
            b = min(len(text), a + rng.randint(1, 200))
            text = text[:b] + text[a:b] + text[b:]
        elif kind < 0.86:
            key = rng.choice([b'"ts"', b'"dur"', b'"cat"', b'"ph"', b'"args"', b'"traceEvents"', b'"name"'])
            text = text.replace(key, rng.choice([key[:-1] + b'\\u0020"', b'"t\\u0073"', key + b': 1, ' + key]), 1)
        elif kind < 0.92:
            text = text[:rng.randrange(len(text))]
        else:
            text = text + rng.choice([b"", b" ", b"{}", text])
    return text


def _pack(text: bytes, rng: random.Random) -> bytes:
    """``text`` as it goes in a file: plain, gzip, or gzip in two members."""
    way = rng.random()
    if way < 0.7:
        return text
    if way < 0.9:
        return gzip.compress(text, 1)
    cut = rng.randrange(len(text) + 1)
    return gzip.compress(text[:cut], 1) + gzip.compress(text[cut:], 1)


class _Timeout(BaseException):
    """Raised in the importer by the alarm of :func:`time_limit`."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def alarm(_signum: int, _frame: Any) -> None:
        raise _Timeout

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def tables(path: Path) -> dict[str, pa.Table] | str:
    """The tables one import of ``path`` would write (rank 0's), or its PerfscopeError's
    message; every other exception propagates."""
    result = importer.ImportResult(path=path.with_suffix(".run"))
    claims = importer._RankClaims(None)
    try:
        read = read_trace(path)
        importer._import_trace(read, path, path.parent, result, claims, background=True)
    except PerfscopeError as e:
        return str(e)
    except importer.VALUE_ERRORS as e:  # what import_kineto turns into its one-line errors
        return str(importer._value_error(path, e, None))
    return {f"{r}/{name}": tbl for r, staged, _ in result._staged for name, tbl in staged.items()}


def run_route(route: str, path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, pa.Table] | str:
    with monkeypatch.context() as m:
        m.setattr(native, "ENABLED", route == "native")
        m.setattr(prefilter, "ENABLED", route != "unfiltered")
        t0 = time.monotonic()
        with time_limit(CASE_SECONDS):
            out = tables(path)
        assert time.monotonic() - t0 < CASE_SECONDS
        return out


@pytest.mark.slow
def test_mutated_traces_import_or_are_refused_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = _seeds()
    outcomes = {"imported": 0, "refused": 0}
    for case in range(FIRST_SEED, FIRST_SEED + CASES):
        rng = random.Random(case)
        path = tmp_path / f"case-{case}.json"
        path.write_bytes(_pack(mutate(rng.choice(seeds), rng), rng))
        routes = ["native", "msgspec"] + (["unfiltered"] if case % 4 == 0 else [])
        try:
            results = {route: run_route(route, path, monkeypatch) for route in routes}
        except _Timeout:
            pytest.fail(f"case {case} (PERFSCOPE_FUZZ_SEED={case} PERFSCOPE_FUZZ_CASES=1) took over {CASE_SECONDS} s")
        except Exception as e:
            raise AssertionError(f"case {case} (PERFSCOPE_FUZZ_SEED={case} PERFSCOPE_FUZZ_CASES=1) raised "
                                 f"{type(e).__name__}: {e}") from e
        first = results["native"]
        for route, other in results.items():
            if isinstance(first, str) or isinstance(other, str):
                assert first == other, f"case {case}: native gave {first!r:.300}, {route} {other!r:.300}"
            else:
                assert first.keys() == other.keys(), f"case {case}: {route} has other tables"
                for name in first:
                    assert first[name].equals(other[name]), f"case {case}: {route} differs in {name}"
        outcomes["refused" if isinstance(first, str) else "imported"] += 1
        path.unlink()
    # The mutator must reach both outcomes, or it tests little.
    assert outcomes["imported"] > CASES // 10 and outcomes["refused"] > CASES // 10, outcomes
    print(f"fuzz: {outcomes}")
