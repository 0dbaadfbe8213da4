"""The Kineto pre-filter and column extractor (``perfscope/store/kineto/*.c``) and the
CUPTI buffer sink (``collectors/cupti/sink.c``) built with sanitizers, run against their
Python-facing tests (issue 20; the NCCL plugin's own harness does the same in
``test_nccl_plugin.py``).

Each build is loaded into a fresh Python (the sanitizer runtime preloaded, the libraries
through ``PERFSCOPE_KINETO_FILTER_LIB`` and ``PERFSCOPE_CUPTI_SINK``) that runs
:data:`TESTS`; any sanitizer report fails the run (``halt_on_error``, and UBSan built not to
recover).  TSan runs the stream tests, whose two threads share one buffer, and the
stress test of the writer's help (the race it found: ``test_the_writers_help_never_races_the_filter``).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfscope.options import ENV_CUPTI_SINK, ENV_KINETO_FILTER_LIB
from perfscope.store.kineto import build as kineto_build

REPO = Path(__file__).resolve().parents[2]
SINK_SOURCE = REPO / "collectors" / "cupti" / "sink.c"
STREAM = "tests/unit/test_store_kineto_stream.py"
#: What each build runs: the C-facing tests that call the C code directly (the imports of
#: whole traces and the byte-at-a-time stream cuts take many minutes under a sanitizer, and
#: go through the same code).
TESTS = {
    "address,undefined": [
        "tests/unit/test_store_kineto_filter.py", "-k", "not shared and not fixtures and not import",
        "tests/unit/test_store_kineto_native.py", "-k", "not shared and not fixtures and not table and not pandas",
        STREAM, "-k", "writers or wrong_split or few_rows or bad_rules or every_way",
        "tests/unit/test_cupti_sink.py", "tests/unit/test_cupti_segments.py",
    ],
    "thread": [
        STREAM, "-k", "writers or wrong_split",
        "tests/unit/test_store_kineto_filter.py::test_two_threads_and_in_place_give_the_same_text",
        "tests/unit/test_store_kineto_filter.py::test_wrong_split_guesses_are_caught",
        "tests/unit/test_store_kineto_filter.py::test_errors_in_either_half_are_found_with_two_threads",
        "tests/unit/test_cupti_sink.py", "tests/unit/test_cupti_segments.py::test_the_writer_thread_writes_on_its_own_and_close_writes_the_rest",
    ],
}
RUNTIME = {"address,undefined": ["libasan.so", "libubsan.so"], "thread": ["libtsan.so"]}
OPTIONS = {
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:verify_asan_link_order=0",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    "TSAN_OPTIONS": "halt_on_error=1:report_signal_unsafe=0:second_deadlock_stack=1",
}
FLAGS = ["-O1", "-g", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]


def _cc(out: Path, sources: list[Path], flags: list[str]) -> Path:
    cmd = [os.environ.get("CC", "cc"), "-std=gnu11", "-fvisibility=hidden", "-Wall", *flags, "-pthread", "-shared",
           "-fPIC", "-o", str(out), *map(str, sources), "-ldl"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def _runtime(names: list[str]) -> str:
    paths = []
    for name in names:
        p = subprocess.run([os.environ.get("CC", "cc"), f"-print-file-name={name}"], capture_output=True, text=True, check=False).stdout.strip()
        if not p or not Path(p).is_file():
            pytest.skip(f"no {name} for this compiler")
        paths.append(p)
    return " ".join(paths)


@pytest.mark.slow
@pytest.mark.parametrize("sanitizer", list(TESTS))
def test_native_code_is_clean_under_sanitizers(sanitizer: str, tmp_path: Path) -> None:
    flags = [f"-fsanitize={sanitizer}", *FLAGS]
    try:
        kineto = kineto_build.build_in_place(extra_flags=flags, out=tmp_path / "libkineto.so")
        sink = _cc(tmp_path / "libsink.so", [SINK_SOURCE], flags)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        pytest.skip(f"cannot build with -fsanitize={sanitizer}: {getattr(e, 'stderr', e)}")
    # Reports go to files (pytest captures fd 2, and halt_on_error ends the process before
    # it would show them).
    logs = tmp_path / "reports"
    logs.mkdir()
    options = {k: f"{v}:log_path={logs / 'report'}" for k, v in OPTIONS.items()}
    env = {**os.environ, **options, "LD_PRELOAD": _runtime(RUNTIME[sanitizer]),
           ENV_KINETO_FILTER_LIB: str(kineto), ENV_CUPTI_SINK: str(sink)}
    probe = subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, check=False)
    if probe.returncode != 0:  # the runtime itself cannot start here (memory layout, ...)
        pytest.skip(f"-fsanitize={sanitizer} runtime does not start under Python: {probe.stderr[-300:]}")
    argv = TESTS[sanitizer]
    # Each "-k" applies to the path before it: one pytest run per group.
    groups: list[list[str]] = []
    for arg in argv:
        if groups and (groups[-1][-1] == "-k" or arg == "-k"):
            groups[-1].append(arg)
        else:
            groups.append([arg])
    for group in groups:
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *group], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=600, check=False)
        out = p.stdout + p.stderr
        reports = "".join(f.read_text(errors="replace") for f in sorted(logs.iterdir()))
        assert not reports, f"{group}:\n{reports[-6000:]}"
        assert "Sanitizer" not in out and "runtime error" not in out, out[-4000:]
        assert p.returncode == 0, out[-4000:]
        assert " passed" in out and "skipped" not in out.splitlines()[-1], out[-1500:]
