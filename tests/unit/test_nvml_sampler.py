"""The NVML sampler against a fake pynvml: rows, intervals, batching, stop, and no NVML."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from doctor_fakes import FakeNvml, nvml_spec

from perfscope.collectors.host.nvml import METRICS, NvmlSampler
from perfscope.store import RankWriter, create_run, open_run
from perfscope.store.schema import table


class ListWriter:
    """Collects what the sampler appends, with the time of each append."""

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[tuple[float, dict[str, list[Any]]]] = []
        self.fail = fail

    def append(self, name: str, data: dict[str, list[Any]]) -> None:
        assert name == "metrics"
        if self.fail:
            raise OSError("disk full")
        self.batches.append((time.monotonic(), data))

    def rows(self) -> list[tuple[int, int, str, float]]:
        return [r for _, b in self.batches for r in zip(b["ts_ns"], b["device"], b["metric"], b["value"])]


@pytest.fixture
def fake_pynvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def _run(sampler: NvmlSampler, seconds: float) -> dict[str, Any]:
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


def test_metric_names_match_the_schema() -> None:
    doc = table("metrics").column("metric").doc
    assert set(METRICS) == {m.strip() for m in doc.split(",")}


def test_rows_land_in_the_metrics_table(tmp_path: Path, fake_pynvml: FakeNvml) -> None:
    create_run(tmp_path / "run")
    with RankWriter(tmp_path / "run", 0) as w:
        stats = _run(NvmlSampler(w, interval_s=0.02), 0.25)
    df = open_run(tmp_path / "run").table("metrics")
    assert stats["available"] and stats["reason"] is None and stats["devices"] == [0, 1]
    assert set(df["metric"].astype(str)) == set(METRICS)
    assert set(df["device"]) == {0, 1}
    assert len(df) == stats["rows"] == stats["rows_appended"]
    last = df[df["device"] == 0].groupby(df["metric"].astype(str))["value"].last()
    assert last["power_w"] == 71.0 and last["mem_used_bytes"] == 565182464.0 and last["temp_c"] == 31.0
    assert last["throttle_reasons"] == 1.0 and last["sm_clock_mhz"] == 345.0
    assert last["pcie_tx_bytes_s"] == 1200 * 1024 and last["pcie_rx_bytes_s"] == 3400 * 1024
    now = time.time_ns()
    assert (df["ts_ns"] > now - 10**10).all() and (df["ts_ns"] <= now).all()
    assert fake_pynvml.initialised == 0  # NVML shut down at stop


def test_sampling_interval_and_batching(fake_pynvml: FakeNvml) -> None:
    w = ListWriter()
    stats = _run(NvmlSampler(w, interval_s=0.02, append_interval_s=0.2, pcie_interval_s=0.1), 0.6)
    ts = sorted(t for t, d, m, _ in w.rows() if d == 0 and m == "sm_util_pct")
    gaps = [(b - a) / 1e9 for a, b in zip(ts, ts[1:])]
    assert 15 <= len(ts) <= 40, len(ts)
    assert sorted(gaps)[len(gaps) // 2] == pytest.approx(0.02, abs=0.01)
    # Rows reach the writer in batches, not one call per sample.
    assert 2 <= len(w.batches) <= 6, len(w.batches)
    assert stats["loops"] == len(ts)
    assert 0 < stats["loop_ms_mean"] <= stats["loop_ms_max"] and stats["loop_ms_p99"] <= stats["loop_ms_max"]
    # PCIe throughput is read less often than the fast metrics.
    pcie = [t for t, d, m, _ in w.rows() if d == 0 and m == "pcie_tx_bytes_s"]
    assert 3 <= len(pcie) < len(ts) / 2


def test_stop_ends_the_thread_and_is_idempotent(fake_pynvml: FakeNvml) -> None:
    w = ListWriter()
    s = NvmlSampler(w, interval_s=0.01)
    s.start()
    time.sleep(0.05)
    stats = s.stop()
    assert not any(t.name == "perfscope-nvml" for t in threading.enumerate())
    n = len(w.rows())
    assert n == stats["rows"] > 0
    time.sleep(0.05)
    assert len(w.rows()) == n  # nothing after stop
    assert s.stop() == stats
    assert fake_pynvml.initialised == 0


def test_unsupported_metric_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = nvml_spec()
    for d in spec["devices"]:
        d["temp_c"] = None
    fake = FakeNvml(spec)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    w = ListWriter()
    stats = _run(NvmlSampler(w, interval_s=0.01), 0.1)
    assert "temp_c" not in {m for _, _, m, _ in w.rows()}
    assert stats["unsupported"] == {"0": ["temp_c"], "1": ["temp_c"]}
    assert fake.calls["nvmlDeviceGetTemperature"] == 2


def test_selected_devices_only(fake_pynvml: FakeNvml) -> None:
    w = ListWriter()
    _run(NvmlSampler(w, interval_s=0.01, devices=[1]), 0.05)
    assert {d for _, d, _, _ in w.rows()} == {1}


def test_writer_failure_is_counted_not_raised(fake_pynvml: FakeNvml) -> None:
    stats = _run(NvmlSampler(ListWriter(fail=True), interval_s=0.01, append_interval_s=0.02), 0.1)
    assert stats["dropped_rows"] == stats["rows"] > 0 and stats["appends"] == 0
    assert "disk full" in stats["append_errors"][0]


def test_no_pynvml_is_a_clean_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    w = ListWriter()
    assert NvmlSampler(w).available is None  # unknown until start() tries NVML
    with NvmlSampler(w) as s:
        assert not s.available and "nvidia-ml-py" in (s.reason or "")
    assert w.batches == [] and s.stats()["loops"] == 0


@pytest.mark.parametrize("kwargs", [{"devices": [5]}, {"interval_s": 0}])
def test_bad_arguments_are_a_noop_with_reason(fake_pynvml: FakeNvml, kwargs: dict[str, Any]) -> None:
    s = NvmlSampler(ListWriter(), **kwargs).start()
    assert not s.available and s.reason
    s.stop()
    assert fake_pynvml.initialised == 0


def test_nvml_without_driver_is_a_noop() -> None:
    s = NvmlSampler(ListWriter(), nvml=FakeNvml(fail_init="Driver Not Loaded")).start()
    assert not s.available and "Driver Not Loaded" in (s.reason or "")
    assert s.stop()["rows"] == 0


def test_a_paused_sampler_reads_nothing_and_sleeps_until_resumed(fake_pynvml: FakeNvml) -> None:
    # GIVEN a sampler that samples, is paused (between two windows), then resumed
    w = ListWriter()
    s = NvmlSampler(w, interval_s=0.01, append_interval_s=10.0)
    s.start()
    time.sleep(0.1)
    s.paused = True
    time.sleep(0.05)  # a sample under way when pausing ends
    paused_at, loops = time.time_ns(), s.stats()["loops"]
    time.sleep(0.3)
    # THEN while paused: no loop, no sample, and the rows held were handed over
    assert s.stats()["loops"] == loops
    assert w.rows() and all(t < paused_at for t, *_ in w.rows())
    resumed_at = time.time_ns()
    s.paused = False
    time.sleep(0.1)
    s.stop()
    ts = [t for t, *_ in w.rows()]
    assert not [t for t in ts if paused_at <= t < resumed_at]
    assert any(t >= resumed_at for t in ts)  # samples again after resume


def test_stop_ends_a_paused_sampler(fake_pynvml: FakeNvml) -> None:
    s = NvmlSampler(ListWriter(), interval_s=0.01)
    s.start()
    s.paused = True
    time.sleep(0.05)
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 1.0
    assert not any(t.name == "perfscope-nvml" for t in threading.enumerate())
