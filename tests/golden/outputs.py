"""Golden outputs: what the CLI prints for every committed fixture and shared trace.

``python -m tests.golden.outputs --write`` (from the repository root) records them under
``tests/golden/expected/``; ``tests/integration/test_golden_outputs.py`` recomputes them and
asserts they are unchanged.  Refactors must leave every output byte-identical (after the
normalisation below, which only removes what depends on where and when the test runs).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
SHARED = REPO.parent / "shared" / "data" / "kineto"
EXPECTED = Path(__file__).resolve().parent / "expected"

# Runs committed under tests/data (recorded by this project).
FIXTURE_RUNS = sorted(p for p in (DATA / "h200").glob("*.perfscope"))
# Kineto traces committed under tests/data, imported one file or a rank set per run.
FIXTURE_TRACES: dict[str, list[Path]] = {
    "kineto_ddp": [DATA / "kineto" / "ddp_rank0.json.gz", DATA / "kineto" / "ddp_rank1.json.gz"],
    "kineto_single_gpu_absolute": [DATA / "kineto" / "single_gpu_absolute.json"],
    **{
        f"scenario_{name}": sorted((DATA / "scenarios" / "kineto").glob(f"{name}_rank*.json.gz"))
        for name in ("comm_heavy", "compute_bound", "host_sync", "launch_bound", "pageable_copies",
                     "slow_dataloader", "straggler")
    },
}
SHARED_TRACES = sorted(SHARED.glob("*.json.gz")) if SHARED.is_dir() else []
COMPARE_PAIRS = [("h200/compute_bound", "h200/launch_bound"), ("h200/record", "h200/profile"),
                 ("h200/straggler", "h200/comm_heavy")]


def _cli(args: list[str]) -> tuple[int, str]:
    """Run the perfscope CLI in-process; returns (exit code, stdout)."""
    from click.testing import CliRunner

    from perfscope.cli.main import cli, main

    runner = CliRunner()
    result = runner.invoke(cli, args, catch_exceptions=True, standalone_mode=False)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # Go through main() for the one-line error a user sees.
        code = main(args)
        return code, f"error: {type(result.exception).__name__}: {result.exception}"
    return 0, result.output


_VOLATILE = [
    (re.compile(r"/tmp/[^\s\"'<>]*?golden-[^/\s\"'<>]+"), "<TMP>"),
    (re.compile(re.escape(str(REPO))), "<REPO>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?(\.\d+)?( UTC|Z|[+-]\d\d:\d\d)?"), "<TIME>"),
    (re.compile(r"perfscope \d+\.\d+\.\d+"), "perfscope <VERSION>"),
]
# Imported runs get a fresh random id each time; recorded fixtures keep theirs.
_RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")


def normalise(text: str, *runs: Path) -> str:
    """Remove what depends on where and when the outputs were made (paths, times, and the
    random ids of runs imported for the test)."""
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    if any(Path(r).name.startswith("golden-") for r in runs):  # imported by _imported for this test
        text = _RUN_ID.sub("<RUN_ID>", text)
    return text


def _imported(tmp: Path, name: str, files: list[Path]) -> Path:
    out = tmp / f"golden-{name}.perfscope"
    if not out.exists():
        code, text = _cli(["import", "kineto", *map(str, files), "-o", str(out)])
        if code != 0 or not out.exists():
            raise RuntimeError(f"import of {name} failed: {text}")
    return out


def cases(tmp: Path) -> Iterator[tuple[str, Callable[[], str]]]:
    """(name, producer) for every golden output; producers return the normalised text."""
    runs: dict[str, Callable[[], Path]] = {}
    for p in FIXTURE_RUNS:
        runs[f"h200/{p.stem}"] = (lambda p=p: p)
    for name, files in FIXTURE_TRACES.items():
        if files:
            runs[f"fixture/{name}"] = (lambda name=name, files=files: _imported(tmp, name.replace("/", "_"), files))
    for f in SHARED_TRACES:
        stem = f.name.removesuffix(".json.gz")
        runs[f"shared/{stem}"] = (lambda stem=stem, f=f: _imported(tmp, "shared_" + stem, [f]))
    for key, get in runs.items():
        for fmt in ("json", "text"):
            yield f"analyze/{key}.{fmt}", (lambda get=get, fmt=fmt: _run_analyze(get(), fmt))
        yield f"report/{key}.md", (lambda get=get: _run_report(get(), "md", tmp))
    for base, new in COMPARE_PAIRS:
        for fmt in ("json", "md", "text"):
            yield (f"compare/{base.replace('/', '_')}__{new.replace('/', '_')}.{fmt}",
                   lambda b=base, n=new, fmt=fmt: _run_compare(runs[b](), runs[n](), fmt))


def _run_analyze(run: Path, fmt: str) -> str:
    code, text = _cli(["analyze", str(run), "--format", fmt])
    return normalise(f"exit {code}\n{text}", run)


def _run_report(run: Path, fmt: str, tmp: Path) -> str:
    out = tmp / f"golden-report-{hashlib.sha1(str(run).encode()).hexdigest()[:8]}.{fmt}"
    code, text = _cli(["report", str(run), "--format", fmt, "-o", str(out), "--force"])
    body = out.read_text() if out.exists() else text
    return normalise(f"exit {code}\n{body}", run)


def _run_compare(base: Path, new: Path, fmt: str) -> str:
    code, text = _cli(["compare", str(base), str(new), "--format", fmt])
    return normalise(f"exit {code}\n{text}", base, new)


def expected_path(name: str) -> Path:
    """Where the golden text of case ``name`` is kept (shared-trace outputs as digests only,
    since those traces are not ours to copy)."""
    if name.split("/")[1] == "shared":
        return EXPECTED / (name.replace("/", "__") + ".sha256")
    return EXPECTED / (name.replace("/", "__"))


def stored_form(name: str, text: str) -> str:
    """What is kept for ``name``: the text, or its SHA-256 for shared traces."""
    if name.split("/")[1] == "shared":
        return hashlib.sha256(text.encode()).hexdigest() + "\n"
    return text


def main(argv: list[str] | None = None) -> int:
    """Write (``--write``) or check every golden output; returns the number of differences."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write", action="store_true", help="record the current outputs as golden")
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="golden-"))
    bad = 0
    try:
        if args.write:
            shutil.rmtree(EXPECTED, ignore_errors=True)
            EXPECTED.mkdir(parents=True)
        for name, produce in cases(tmp):
            if args.k not in name:
                continue
            got = stored_form(name, produce())
            path = expected_path(name)
            if args.write:
                path.write_text(got)
            elif not path.exists() or path.read_text() != got:
                bad += 1
                sys.stderr.write(f"DIFFERS: {name}\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return bad


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
