"""The doctor and the NVML sampler on a real GPU (run on the device machine)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from perfscope.collectors.host.nvml import NvmlSampler
from perfscope.doctor import diagnose
from perfscope.store import RankWriter, create_run, open_run

pytestmark = pytest.mark.gpu


def test_doctor_sees_the_gpus() -> None:
    doc = diagnose()
    gpus = doc["facts"]["gpus"]
    assert gpus["available"] and gpus["count"] >= 1, gpus.get("reason")
    checks = {c["id"]: c for c in doc["checks"]}
    assert checks["gpu.driver"]["status"] == "pass"
    d0 = gpus["devices"][0]
    assert d0["name"] and d0["uuid"].startswith("GPU-") and d0["memory_total_bytes"] > 0


def test_sampler_fills_metrics(tmp_path: Path) -> None:
    create_run(tmp_path / "run")
    with RankWriter(tmp_path / "run", 0) as w:
        s = NvmlSampler(w, interval_s=0.05).start()
        assert s.available, s.reason
        time.sleep(1.2)
        stats = s.stop()
    df = open_run(tmp_path / "run").table("metrics")
    metrics = set(df["metric"].astype(str))
    assert {"sm_util_pct", "mem_used_bytes", "power_w", "sm_clock_mhz", "temp_c"} <= metrics, (metrics, stats["unsupported"])
    n = (df["metric"].astype(str) == "sm_util_pct").sum() / df["device"].nunique()
    assert n >= 15, stats
    assert stats["loop_ms_p99"] < 50, stats
