"""GPU test of out-of-process decoding: `perfscope record` killed with SIGKILL mid-run
(the launcher first, so nothing decodes the last segments, then the job), then
`perfscope recover` and `perfscope analyze` (marked gpu; run on the device machine).

When ``$OUT`` is set the killed run is kept under ``$OUT/recover_gpu/``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import perfscope
from perfscope.collectors.cupti import segments

pytestmark = pytest.mark.gpu
LOOP = r'''
import sys, time
import torch
from torch import nn
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(64, 256, device="cuda")
while True:  # until killed
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss.item()
'''


def _wait_for(cond, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _segment_files(run: Path) -> list[Path]:
    folder = segments.rank_folder(run, 0)
    return [p for p in folder.iterdir() if ".cupti" in p.name and not p.name.startswith(".")] if folder.is_dir() else []


def test_a_job_killed_with_sigkill_is_recovered_and_analysed(tmp_path: Path) -> None:
    base = Path(os.environ["OUT"]) / "recover_gpu" if os.environ.get("OUT") else tmp_path
    base.mkdir(parents=True, exist_ok=True)
    run = base / "killed.perfscope"
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    env = {k: v for k, v in os.environ.items() if k != "PERFSCOPE_RUN_DIR"}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "perfscope", "record", "-o", str(run), "--force", "--flush-interval", "0.5",
         "--no-nccl", "--no-nvml", "--", sys.executable, str(script)],
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        _wait_for(lambda: len(_segment_files(run)) >= 3)
        os.kill(launcher.pid, signal.SIGKILL)  # nothing decodes from here on
        launcher.wait()
        undecoded = len(segments.list_segments(segments.rank_folder(run, 0))[0])
        _wait_for(lambda: sum(not s.decoded for s in segments.list_segments(segments.rank_folder(run, 0))[0]) >= 2)
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)  # the job (same session)
    time.sleep(0.5)
    assert undecoded >= 3
    rec = subprocess.run([sys.executable, "-m", "perfscope", "recover", str(run)], capture_output=True, text=True,
                         timeout=300)
    (base / "recover.txt").write_text(rec.stdout + rec.stderr)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert "recovered" in rec.stdout and "kernels" in rec.stdout, rec.stdout
    ana = subprocess.run([sys.executable, "-m", "perfscope", "analyze", str(run), "--format", "json"], capture_output=True,
                         text=True, timeout=300)
    (base / "analyze.json").write_text(ana.stdout)
    assert ana.returncode == 0, ana.stderr
    assert json.loads(ana.stdout)
    r = perfscope.open_run(run)
    assert r.status == "incomplete" and r.meta["recovered"]["segments"] >= 2
    assert r.row_counts()["kernels"] > 100 and r.row_counts()["steps"] > 0
    assert not segments.pending_count(run)
    assert r.verify().ok
    # every record once, wherever the launcher's decoder was killed (issue 16: publish then retire)
    kernels = r.table("kernels")
    assert not kernels.duplicated(["start_ns", "correlation"]).any(), kernels[kernels.duplicated(["start_ns", "correlation"])]
