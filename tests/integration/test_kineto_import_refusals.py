"""Bad Kineto traces through the CLI: every one is refused with one line and exit 2, on
every route of the importer, and leaves nothing on disk (issue 20).

Routes: the default one (pre-filter, native column extractor), msgspec after the filter
(``PERFSCOPE_KINETO_NATIVE=0``) and msgspec on the whole text (``PERFSCOPE_KINETO_FILTER=0``).
"""
from __future__ import annotations

import errno
import gzip
import time
from pathlib import Path

import pytest

from perfscope.cli.main import main
from perfscope.store import open_run
from perfscope.store.kineto import importer, read
from tests.kineto_bad_traces import REFUSED, trace

ROUTES = {
    "native": {},
    "msgspec": {"PERFSCOPE_KINETO_NATIVE": "0"},
    "unfiltered": {"PERFSCOPE_KINETO_FILTER": "0"},
}


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (hidden ones too) with its bytes."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(params=list(ROUTES))
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in ROUTES[request.param].items():
        monkeypatch.setenv(name, value)
    return str(request.param)


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("command", ["import", "analyze"])
def test_bad_values_are_refused_in_one_line(case: str, command: str, route: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    text, message = REFUSED[case]
    src = tmp_path / "in"
    src.mkdir()
    (src / "t.json").write_bytes(text)
    (src / "t2.json.gz").write_bytes(gzip.compress(text))
    before = tree(tmp_path)
    for name in ("t.json", "t2.json.gz"):
        out = tmp_path / f"run-{name}"
        argv = (["import", "kineto", str(src / name), "-o", str(out)] if command == "import"
                else ["analyze", str(src / name), "-o", str(out)])
        t0 = time.monotonic()
        code, stdout, err = run_cli(capsys, *argv)
        assert time.monotonic() - t0 < 20  # (1e999000 took 26 s, then a traceback)
        assert code == 2, (code, err)
        assert message in err, err
        assert err.startswith("perfscope: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err and stdout == ""
    assert tree(tmp_path) == before  # no run, no staging folder left behind


def test_a_refused_import_leaves_an_existing_run_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_bytes(trace())
    bad.write_bytes(REFUSED["ts_exponent_huge"][0])
    assert run_cli(capsys, "import", "kineto", str(good), "-o", str(tmp_path / "run"))[0] == 0
    before = tree(tmp_path)
    code, _, err = run_cli(capsys, "import", "kineto", str(bad), "-o", str(tmp_path / "run"), "--force")
    assert code == 2 and "traceEvents[2]: ts 1e999000" in err
    assert tree(tmp_path) == before


def test_three_huge_exponents_are_refused_at_once(route: str, tmp_path: Path) -> None:
    text = trace(ts="1e999000", dur="-1e999000").replace(b'"ts": 1733126405002000', b'"ts": 1e999000')
    (tmp_path / "t.json").write_bytes(text)
    t0 = time.monotonic()
    with pytest.raises(importer.InputError, match=r"traceEvents\[0\]: ts 1e999000 is out of range"):
        importer.import_kineto(tmp_path / "t.json", tmp_path / "run")
    assert time.monotonic() - t0 < 10  # (took 145 s)


def test_negative_durations_are_dropped_and_counted(route: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.json").write_bytes(trace(dur="-5"))
    code, _, err = run_cli(capsys, "import", "kineto", str(tmp_path / "t.json"), "-o", str(tmp_path / "run"))
    assert code == 0
    assert "1 events with a negative dur dropped (kernels: 1)" in err
    run = open_run(tmp_path / "run")
    assert len(run.table("kernels")) == 0 and len(run.table("steps")) == 1
    assert "negative dur" in " ".join(run.meta["ranks"][0]["warnings"])


def test_times_near_the_limit_import_exactly(route: str, tmp_path: Path) -> None:
    # 16 integer digits and three decimals: the largest epoch-like µs values still import.
    (tmp_path / "t.json").write_bytes(trace(ts="4611686018427386.123", dur="0.001"))
    importer.import_kineto(tmp_path / "t.json", tmp_path / "run")
    k = open_run(tmp_path / "run").table("kernels")
    assert k["start_ns"].tolist() == [4611686018427386123] and k["dur_ns"].tolist() == [1]


@pytest.mark.parametrize("streams", [True, False])
def test_every_gzip_member_is_read(streams: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if streams:  # (streams are tried from 1 byte on: a file of two members falls back to the whole read)
        monkeypatch.setattr(read, "_STREAM_BYTES", 1)
    else:
        monkeypatch.setenv("PERFSCOPE_KINETO_STREAM", "0")
    text = trace()
    (tmp_path / "one.json.gz").write_bytes(gzip.compress(text))
    half = len(text) // 2
    (tmp_path / "two.json.gz").write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    importer.import_kineto(tmp_path / "one.json.gz", tmp_path / "a")
    importer.import_kineto(tmp_path / "two.json.gz", tmp_path / "b")
    for table in ("kernels", "api", "steps"):
        assert open_run(tmp_path / "a").table(table).equals(open_run(tmp_path / "b").table(table))
    (tmp_path / "joined.json.gz").write_bytes(gzip.compress(text) * 2)
    with pytest.raises(importer.InputError, match="more than one JSON document"):
        importer.import_kineto(tmp_path / "joined.json.gz", tmp_path / "c")
    (tmp_path / "junk.json.gz").write_bytes(gzip.compress(text) + b"junk")
    with pytest.raises(importer.InputError, match="bytes after its gzip data that are not gzip"):
        importer.import_kineto(tmp_path / "junk.json.gz", tmp_path / "d")


@pytest.mark.parametrize("command", ["import", "analyze"])
def test_max_inflate_refuses_a_gzip_bomb(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(read, "_STREAM_BYTES", 1)  # the streamed read refuses it as well
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (8 << 20) + b"]}"))
    before = tree(tmp_path)
    argv = ["import", "kineto", str(bomb), "-o", str(tmp_path / "run")] if command == "import" else \
        ["analyze", str(bomb), "-o", str(tmp_path / "run")]
    code, _, err = run_cli(capsys, *argv, "--max-inflate", "1M")
    assert code == 2 and "inflates to more than 1 MiB (--max-inflate)" in err
    assert tree(tmp_path) == before
    code, _, err = run_cli(capsys, *argv, "--max-inflate", "lots")
    assert code == 2 and "is not a size" in err
    monkeypatch.setattr(read, "MAX_INFLATE_DEFAULT", 1 << 20)  # the default applies without the option
    with pytest.raises(importer.InputError, match="inflates to more than 1 MiB"):
        importer.import_kineto(bomb, tmp_path / "run")
    importer.import_kineto(bomb, tmp_path / "run", max_inflate=0)  # 0: no limit


def test_out_of_memory_is_not_called_an_unwritable_folder(tmp_path: Path) -> None:
    msg = str(importer._write_error(tmp_path, OSError(errno.ENOMEM, "Cannot allocate memory")))
    assert "not enough memory" in msg and "writable" not in msg
    assert "writable" in str(importer._write_error(tmp_path, OSError(errno.EACCES, "Permission denied")))


def test_a_rank_file_whose_rank_is_not_an_integer_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.json").write_bytes(trace())
    importer.import_kineto(tmp_path / "t.json", tmp_path / "run")
    rank_file = tmp_path / "run" / "ranks" / "rank-0.json"
    rank_file.write_text(rank_file.read_text().replace('"rank": 0', '"rank": "zero"', 1))
    for argv in (["info"], ["analyze"], ["report", "--format", "json"], ["export", "chrome", "-o", str(tmp_path / "x.json")]):
        code, _, err = run_cli(capsys, *argv[:1], *argv[1:2] if argv[0] == "export" else [], str(tmp_path / "run"),
                               *(argv[1:] if argv[0] != "export" else argv[2:]))
        assert code == 2 and "rank-0.json has rank 'zero', not an integer" in err, (argv, err)
