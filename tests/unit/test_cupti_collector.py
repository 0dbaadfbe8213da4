"""The CUPTI collector's behaviour where no GPU is present (CI)."""
from __future__ import annotations

import pytest

from perfscope.collectors.cupti import CuptiCollector, available, nvtx_injection_env
from perfscope.collectors.cupti.probe import ClockCheck, check_clock
from perfscope.errors import CuptiUnavailableError, UsageError


class _Writer:
    def __init__(self) -> None:
        self.batches: list = []

    def append(self, table: str, batch: object) -> None:
        self.batches.append((table, batch))


def _no_gpu() -> bool:
    ok, _ = available()
    return not ok


def test_available_gives_a_reason() -> None:
    ok, why = available()
    assert isinstance(ok, bool)
    assert ok or why


@pytest.mark.skipif(not _no_gpu(), reason="a GPU with CUPTI is present")
def test_start_without_gpu_raises_cupti_unavailable() -> None:
    c = CuptiCollector(_Writer())
    with pytest.raises(CuptiUnavailableError, match="cannot be recorded"):
        c.start()
    c.flush()  # no-ops after a failed start
    assert c.stop()["rows"] == {}


def test_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown CUPTI collector kind"):
        CuptiCollector(_Writer(), kinds=("kernel", "kernels"))


def test_nvtx_injection_env_points_at_libcupti(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    env = nvtx_injection_env()
    assert env == {} or "libcupti.so" in env["NVTX_INJECTION64_PATH"]
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/opt/nsight/libToolsInjection64.so")
    assert nvtx_injection_env() == {}  # never override another tool


def test_clock_check_epoch_and_offset() -> None:
    import time

    c = check_clock(lambda: time.clock_gettime_ns(time.CLOCK_REALTIME))
    assert c == ClockCheck(0, True, c.bracket_ns, c.error_ns)
    off = check_clock(lambda: time.clock_gettime_ns(time.CLOCK_REALTIME) - 5_000_000_000)
    assert not off.epoch and abs(off.offset_ns - 5_000_000_000) < 50_000_000
