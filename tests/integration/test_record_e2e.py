"""`perfscope record -- CMD` end to end, in subprocesses (CPU only)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import perfscope

REPO = Path(__file__).resolve().parents[2]
RECORD = [sys.executable, "-m", "perfscope", "record"]

# A non-torch script that still records something: perfscope.annotate ranges (perfscope
# is already imported by the injected sitecustomize, so this costs nothing).
MARKER_SCRIPT = """
import os, sys, time
from pathlib import Path
import perfscope
for i in range({n}):
    with perfscope.annotate(f"work{{i}}"):
        time.sleep(0.001)
Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep({sleep})
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PERFSCOPE_RUN_DIR", None)
    env.pop("PERFSCOPE_OWNER", None)
    env.update(extra)
    return env


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """subprocess.run that kills the whole process tree (torchrun workers too) on timeout."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout} s: {cmd}\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _rows_on_disk(table_dir: Path) -> int:
    """Rows in the part files written so far (a part is renamed into place only when complete)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in table_dir.glob("rank=0/part-*.parquet"))


def _wait_for(path: Path, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def test_record_python_script_with_torch_host_data_and_exit_code(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys, time, torch
        from torch.utils.data import DataLoader, Dataset
        class Slow(Dataset):
            def __len__(self): return 8
            def __getitem__(self, i):
                time.sleep(0.005)
                return torch.randn(4)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in DataLoader(Slow(), batch_size=2):
            model(x).sum().backward(); opt.step(); opt.zero_grad()
        print("TRAINED", flush=True)
        sys.exit(3)
    """))
    out = tmp_path / "run"
    res = subprocess.run([*RECORD, "-o", str(out), "--", sys.executable, str(script)],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 3, res.stderr
    assert "TRAINED" in res.stdout  # the child's stdout passes through
    assert f"perfscope analyze {out}" in res.stderr
    run = perfscope.open_run(out)
    assert run.status == "complete"
    assert run.meta["source"] == "record" and run.meta["exit_code"] == 3 and run.meta["world_size"] == 1
    assert run.meta["command"][-1] == str(script)
    assert run.ranks == [0]
    host = run.table("host")
    assert (host["kind"].astype(str) == "dataloader_wait").sum() >= 4
    assert (host["kind"].astype(str) == "optimizer_step").sum() == 4
    steps = run.table("steps")
    assert steps["step"].tolist() == [1, 2, 3]  # step 0 has no known start under record
    assert set(steps["source"].astype(str)) == {"optimizer"}
    meta = run.rank_meta(0)
    assert meta["status"] == "complete" and meta["source"] == "record"
    import torch

    if not torch.cuda.is_available():
        assert any("no NVIDIA GPU found" in w for w in meta["warnings"])
        assert "no NVIDIA GPU found" in res.stderr


def test_sigterm_flushes_and_marks_incomplete(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(MARKER_SCRIPT.format(n=5, sleep=60))
    ready = tmp_path / "pid"
    out = tmp_path / "run"
    # A flush interval far longer than the test: only the SIGTERM handler can write the rows.
    proc = subprocess.Popen([*RECORD, "-o", str(out), "--flush-interval", "600", "--no-cupti", "--no-nccl", "--no-nvml",
                             "--", sys.executable, str(script), str(ready)], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(ready)
    proc.send_signal(signal.SIGTERM)  # to the launcher: it forwards to the child
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    run = perfscope.open_run(out)
    assert run.status == "incomplete"
    assert run.row_counts()["markers"] == 5
    meta = run.rank_meta(0)
    assert meta["status"] == "incomplete" and meta["stop_reason"] == "SIGTERM"
    assert run.meta["signals_forwarded"] == ["SIGTERM"]


def test_sigkill_leaves_a_readable_incomplete_run(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(MARKER_SCRIPT.format(n=7, sleep=60))
    ready = tmp_path / "pid"
    out = tmp_path / "run"
    proc = subprocess.Popen([*RECORD, "-o", str(out), "--flush-interval", "0.1", "--no-cupti", "--no-nccl", "--no-nvml",
                             "--", sys.executable, str(script), str(ready)], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child_pid = int(_wait_for(ready))
    deadline = time.monotonic() + 30
    # The background flusher writes within one interval; a flush may have caught the loop
    # halfway, so wait for the one after it (the killed run must hold every row flushed).
    while time.monotonic() < deadline and _rows_on_disk(out / "markers") < 7:
        time.sleep(0.05)
    os.kill(child_pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL, err
    run = perfscope.open_run(out)
    assert run.status == "incomplete"
    assert run.row_counts()["markers"] == 7
    # it never got to say otherwise; the launcher says it for it (issue #20)
    assert run.rank_meta(0)["status"] == "incomplete"
    assert run.rank_meta(0)["stop_reason"] == "killed (SIGKILL) before its last flush"


def test_torchrun_two_ranks_write_two_shards_with_barriers(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed not built")
    script = tmp_path / "dist.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        t = torch.ones(8)
        for _ in range(3):
            dist.all_reduce(t)
            dist.barrier()
        dist.destroy_process_group()
    """))
    out = tmp_path / "run"
    cmd = [*RECORD, "-o", str(out), "--no-nccl", "--", sys.executable, "-m", "torch.distributed.run",
           "--standalone", "--nproc-per-node", "2", str(script)]
    res = _run(cmd, cwd=tmp_path, env=_env(OMP_NUM_THREADS="1"), timeout=180)
    assert res.returncode == 0, res.stderr
    run = perfscope.open_run(out)
    assert run.status == "complete"
    assert run.ranks == [0, 1] and run.meta["world_size"] == 2
    host = run.table("host")
    for rank in (0, 1):
        mine = host[host["rank"] == rank]
        assert (mine["kind"].astype(str) == "barrier").sum() == 3
        assert ((mine["kind"].astype(str) == "collective_wait") & (mine["name"].astype(str) == "all_reduce")).sum() == 3
        meta = run.rank_meta(rank)
        assert meta["world_size"] == 2 and meta["local_rank"] == rank and meta["status"] == "complete"
    # the torchrun agent recorded nothing of its own
    assert len({run.rank_meta(r)["pid"] for r in (0, 1)}) == 2


def test_profile_in_a_torchrun_job_writes_one_run_with_every_rank(tmp_path: Path) -> None:
    """In-process API under torchrun (no `perfscope record`): ranks agree on one run."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed not built")
    script = tmp_path / "prof.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, torch.distributed as dist, perfscope
        with perfscope.profile(sys.argv[1], cupti=False, nvml=False) as prof:
            dist.init_process_group("gloo")
            t = torch.ones(4)
            for _ in range(3):
                dist.all_reduce(t)
                prof.step()
            dist.barrier()
            dist.destroy_process_group()
    """))
    out = tmp_path / "run"
    res = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script), str(out)],
               cwd=tmp_path, env=_env(OMP_NUM_THREADS="1"), timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    run = perfscope.open_run(out)
    assert run.status == "complete" and run.ranks == [0, 1] and run.meta["world_size"] == 2
    steps = run.table("steps")
    assert steps.groupby("rank").size().tolist() == [3, 3]
    host = run.table("host")
    assert (host["kind"].astype(str) == "barrier").groupby(host["rank"]).sum().tolist() == [1, 1]


def test_sigterm_while_blocked_in_native_code_still_kills_promptly(tmp_path: Path) -> None:
    """Our Python SIGTERM handler must not make a process stuck in C++ unkillable."""
    pytest.importorskip("torch")
    script = tmp_path / "blocked.py"
    script.write_text(textwrap.dedent("""
        import datetime, os, socket, sys
        from pathlib import Path
        import torch.distributed as dist
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        Path(sys.argv[1]).write_text(str(os.getpid()))
        # waits in C++ for a server that never comes (up to 60 s)
        dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    """))
    ready = tmp_path / "pid"
    out = tmp_path / "run"
    proc = subprocess.Popen([*RECORD, "-o", str(out), "--no-cupti", "--no-nccl", "--no-nvml", "--", sys.executable,
                             str(script), str(ready)], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(_wait_for(ready))
        time.sleep(1.0)  # inside the TCPStore wait by now
        t0 = time.monotonic()
        os.kill(child, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    run = perfscope.open_run(out)
    assert run.status == "incomplete"
    assert "blocked in native code" in run.rank_meta(0)["stop_reason"]


def test_existing_sitecustomize_is_chained(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIR_SITECUSTOMIZE_RAN'] = '1'\n")
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import os, sys, perfscope
        with perfscope.annotate("chained"):
            pass
        print("THEIRS=" + os.environ.get("THEIR_SITECUSTOMIZE_RAN", "0"))
        import sitecustomize
        print("OURS=" + str("perfscope" in (sitecustomize.__doc__ or "")))
    """))
    out = tmp_path / "run"
    res = subprocess.run([*RECORD, "-o", str(out), "--no-cupti", "--no-nccl", "--no-nvml", "--", sys.executable, str(script)],
                         cwd=tmp_path, env=_env(PYTHONPATH=str(theirs)), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "THEIRS=1" in res.stdout and "OURS=True" in res.stdout
    run = perfscope.open_run(out)
    assert run.table("markers")["name"].astype(str).tolist() == ["chained"]


def test_profile_inside_a_recorded_job_marks_the_record_runs_steps(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import time, perfscope
        with perfscope.profile("inner-run") as prof:
            for _ in range(4):
                time.sleep(0.002)
                prof.step()
    """))
    out = tmp_path / "run"
    res = subprocess.run([*RECORD, "-o", str(out), "--no-cupti", "--no-nccl", "--no-nvml", "--", sys.executable, str(script)],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "inner-run").exists()
    run = perfscope.open_run(out)
    steps = run.table("steps")
    assert steps["step"].tolist() == [0, 1, 2, 3] and set(steps["source"].astype(str)) == {"explicit"}
    assert any("inner-run" in w for w in run.rank_meta(0)["warnings"])


def test_non_python_command_runs_and_says_nothing_was_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = subprocess.run([*RECORD, "-o", str(out), "--", "sh", "-c", "echo hi; exit 5"],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 5 and res.stdout.strip() == "hi"
    assert "no process of the command recorded" in res.stderr
    assert perfscope.open_run(out).meta["exit_code"] == 5


def test_existing_output_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = [*RECORD, "-o", str(out), "--no-cupti", "--no-nccl", "--no-nvml", "--", sys.executable, "-c", "pass"]
    assert subprocess.run(base, cwd=tmp_path, env=_env(), capture_output=True, timeout=60).returncode == 0
    again = subprocess.run(base, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "--force" in again.stderr
    forced = [*RECORD, "--force", *base[len(RECORD):]]
    assert subprocess.run(forced, cwd=tmp_path, env=_env(), capture_output=True, timeout=60).returncode == 0


def _record_cpu(tmp_path: Path, script_text: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent(script_text))
    return _run([*RECORD, "-o", str(tmp_path / "run"), "--no-cupti", "--no-nccl", "--no-nvml", "--",
                 sys.executable, str(script)], cwd=tmp_path, env=_env(), timeout=timeout)


def test_sigterm_to_a_forked_child_does_not_kill_the_recorded_parent(tmp_path: Path) -> None:
    # multiprocessing.Pool.terminate() and DataLoader shutdown SIGTERM fork children; the
    # child inherits the signal wakeup fd, and must not make the parent's watcher kill it.
    res = _record_cpu(tmp_path, """
        import os, signal, sys, time
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        time.sleep(0.3)
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        time.sleep(2.5)  # longer than the watcher's grace period
        print("parent survived")
        sys.exit(5)
    """)
    assert res.returncode == 5, res.stderr
    assert "parent survived" in res.stdout
    assert perfscope.open_run(tmp_path / "run").status == "complete"


def test_programs_own_sigterm_handler_installed_later_decides(tmp_path: Path) -> None:
    # e.g. checkpoint-on-preemption: the handler notes the signal and the program exits later.
    res = _record_cpu(tmp_path, """
        import os, signal, sys, time
        got = []
        signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(25):
            time.sleep(0.1)
        print("graceful", got)
        sys.exit(3)
    """)
    assert res.returncode == 3, res.stderr
    assert "graceful [15]" in res.stdout


def test_asyncio_run_keeps_its_ctrl_c_handling(tmp_path: Path) -> None:
    # asyncio.run() installs its SIGINT handler only over Python's default one.
    res = _record_cpu(tmp_path, """
        import asyncio, os, signal
        async def main():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                print("main task cancelled")
                raise
        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
    """)
    assert "main task cancelled" in res.stdout, res.stdout + res.stderr
    assert "KeyboardInterrupt" in res.stdout
