"""Host collectors: DataLoader waits, torch.distributed, optimizer, sync, patching helpers."""
from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

import pytest

import perfscope
from perfscope.collectors.host import dataloader, distributed, optimizer, sync
from perfscope.collectors.host.patching import Patches, when_imported
from perfscope.collectors.host.spans import HostSpans, Markers

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class SlowDataset(Dataset):
    """Each item takes ``delay_s`` to load."""

    def __init__(self, n: int, delay_s: float) -> None:
        self.n, self.delay_s = n, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.delay_s)
        return torch.full((2,), float(i))


def test_dataloader_waits_are_measured() -> None:
    spans = HostSpans()
    undo = dataloader.install(spans)
    try:
        batches = list(DataLoader(SlowDataset(6, 0.01), batch_size=2))
    finally:
        undo()
    assert len(batches) == 3
    data = spans.drain()
    assert data is not None
    nexts = [d for d, n in zip(data["dur_ns"], data["name"]) if n == "DataLoader.__next__"]
    # three batches plus the StopIteration call; each batch waited for 2 x 10 ms
    assert len(nexts) == 4
    assert all(d >= 20_000_000 for d in nexts[:3])
    assert set(data["kind"]) == {"dataloader_wait"}
    assert data["name"].count("DataLoader.__iter__") == 1
    assert all(t == threading.get_native_id() for t in data["tid"])
    # restored: iterating again records nothing
    list(DataLoader(SlowDataset(2, 0), batch_size=2))
    assert spans.drain() is None


def test_dataloader_waits_in_a_profiled_run_with_workers(tmp_path: Path) -> None:
    with perfscope.profile(tmp_path / "dl", cupti=False, nccl=False, nvml=False):
        for _ in DataLoader(SlowDataset(8, 0.02), batch_size=2, num_workers=2):
            pass
    host = perfscope.open_run(tmp_path / "dl").table("host")
    waits = host[host["name"].astype(str) == "DataLoader.__next__"]
    assert len(waits) == 5
    # 2 workers, 40 ms per batch: the loop waits; worker processes wrote nothing themselves
    assert waits["dur_ns"].sum() >= 40_000_000
    assert set(perfscope.open_run(tmp_path / "dl").ranks) == {0}


def test_spans_off_records_nothing() -> None:
    spans = HostSpans()
    spans.on = False
    undo = dataloader.install(spans)
    try:
        list(DataLoader(SlowDataset(2, 0), batch_size=1))
    finally:
        undo()
    assert len(spans) == 0


def test_optimizer_hooks_give_spans_and_leader_boundaries() -> None:
    spans = HostSpans()
    ends: list[int] = []
    undo = optimizer.install(spans, ends.append)
    try:
        a = torch.nn.Linear(2, 1)
        b = torch.nn.Linear(2, 1)
        opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
        opt_b = torch.optim.Adam(b.parameters())
        for _ in range(3):
            (a(torch.ones(1, 2)).sum() + b(torch.ones(1, 2)).sum()).backward()
            opt_a.step()
            opt_b.step()
    finally:
        undo()
    data = spans.drain()
    assert data is not None
    assert data["name"] == ["SGD", "Adam"] * 3
    assert set(data["kind"]) == {"optimizer_step"}
    assert len(ends) == 3  # only the first optimizer marks step boundaries
    from torch.optim import optimizer as optim_mod

    assert not optim_mod._global_optimizer_post_hooks and not optim_mod._global_optimizer_pre_hooks


def test_distributed_wrappers_record_and_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed not built")
    original = dist.barrier
    calls: list[tuple[object, ...]] = []

    def fake_barrier(*args: object, **kwargs: object) -> str:
        time.sleep(0.003)
        calls.append(args)
        return "done"

    def fake_all_reduce(*args: object, **kwargs: object) -> None:
        return None

    monkeypatch.setattr(dist, "barrier", fake_barrier)
    monkeypatch.setattr(dist, "all_reduce", fake_all_reduce)
    spans = HostSpans()
    undo = distributed.install(spans)
    try:
        assert dist.barrier() == "done"
        dist.all_reduce(torch.ones(1), async_op=True)
        assert dist.barrier.__wrapped__ is fake_barrier  # type: ignore[attr-defined]
    finally:
        undo()
    assert dist.barrier is fake_barrier and dist.all_reduce is fake_all_reduce
    data = spans.drain()
    assert data is not None
    assert list(zip(data["kind"], data["name"])) == [("barrier", "barrier"), ("collective_wait", "all_reduce(async)")]
    assert data["dur_ns"][0] >= 3_000_000
    monkeypatch.undo()
    assert dist.barrier is original


def test_sync_wrapper_records_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[int] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: called.append(1))
    fake = torch.cuda.synchronize
    spans = HostSpans()
    undo = sync.install(spans)
    try:
        torch.cuda.synchronize()
    finally:
        undo()
    assert torch.cuda.synchronize is fake and called == [1]
    data = spans.drain()
    assert data is not None and data["kind"] == ["sync_wait"] and data["name"] == ["torch.cuda.synchronize"]


def test_patches_restore_in_reverse_and_respect_later_patches() -> None:
    class Base:
        def f(self) -> str:
            return "base"

    class Child(Base):
        pass

    p = Patches()
    p.replace(Child, "f", lambda self: "patched")
    assert Child().f() == "patched"
    p.restore()
    assert "f" not in Child.__dict__ and Child().f() == "base"

    mod = types.SimpleNamespace(x=1)
    p.replace(mod, "x", 2)
    mod.x = 3  # someone else patched after us: leave theirs
    p.restore()
    assert mod.x == 3


def test_when_imported_runs_after_the_module_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ps_fake_mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    when_imported("ps_fake_mod", lambda m: seen.append(m.VALUE + 1))
    assert seen == []
    import ps_fake_mod  # type: ignore[import-not-found]  # noqa: F401

    assert seen == [42]
    assert type(sys.modules["ps_fake_mod"].__loader__).__name__ != "_CallbackLoader"
    # already imported: runs now
    when_imported("ps_fake_mod", lambda m: seen.append(0))
    assert seen == [42, 0]
    sys.modules.pop("ps_fake_mod", None)


def test_when_imported_can_be_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ps_fake_mod2.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[str] = []
    cancel = when_imported("ps_fake_mod2", lambda m: seen.append("x"))
    cancel()
    import ps_fake_mod2  # type: ignore[import-not-found]  # noqa: F401

    assert seen == []
    sys.modules.pop("ps_fake_mod2", None)


def test_drain_never_loses_rows_appended_concurrently() -> None:
    spans = HostSpans()
    total = 20000
    got = 0

    def producer() -> None:
        for i in range(total):
            spans.add_span(i, i + 1, "other", "x")

    t = threading.Thread(target=producer)
    t.start()
    while t.is_alive():
        d = spans.drain()
        got += len(d["start_ns"]) if d else 0
    t.join()
    d = spans.drain()
    got += len(d["start_ns"]) if d else 0
    assert got == total


def test_markers_columns() -> None:
    m = Markers(pid=7)
    m.add_span(10, 25, "fwd")
    data = m.drain()
    assert data == {
        "start_ns": [10], "dur_ns": [15], "pid": [7], "tid": [threading.get_native_id()], "name": ["fwd"],
        "domain": ["perfscope"], "source": ["perfscope"],
    }
