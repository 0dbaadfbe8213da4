"""The native buffer sink without CUPTI: synthetic buffers walked end to end (ps_feed_plain)."""
from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from perfscope.collectors.cupti import cbids, decode, layouts


@pytest.fixture(scope="module")
def sink():
    from perfscope.collectors.cupti import native
    from perfscope.errors import CuptiUnavailableError
    from perfscope.options import ENV_CUPTI_SINK

    # (the sanitizer tests run this file against a sink built with -fsanitize)
    native.use_library(os.environ.get(ENV_CUPTI_SINK) or None)
    if native.library_path() is None:
        try:
            from perfscope.collectors.cupti import build

            build.build_in_place()
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"native sink not built and no compiler: {e}")
    try:
        s = native.Sink()
    except CuptiUnavailableError as e:
        pytest.skip(str(e))
    s.reset()
    return s


def _kernel(name_ptr: int, start: int, corr: int) -> np.ndarray:
    r = np.zeros(1, layouts.KERNEL)
    r["kind"], r["start"], r["end"], r["correlation_id"], r["name"] = layouts.KIND_CONCURRENT_KERNEL, start, start + 500, corr, name_ptr
    r["grid_x"] = r["block_x"] = 1
    return r


def _api(kind: int, cbid: int, corr: int) -> np.ndarray:
    r = np.zeros(1, layouts.API)
    r["kind"], r["cbid"], r["start"], r["end"], r["correlation_id"] = kind, cbid, 1000 + corr, 1100 + corr, corr
    return r


def test_sink_copies_filters_and_interns(sink) -> None:
    names = [ctypes.create_string_buffer(b"_Z6kernelPf"), ctypes.create_string_buffer(b"other_kernel")]
    ptrs = [ctypes.addressof(n) for n in names]
    launch = next(k for k, v in cbids.RUNTIME.items() if v == "cudaLaunchKernel")
    get_device = 1000  # any id outside the keep-list
    recs = [_kernel(ptrs[0], 10_000, 1), _api(layouts.KIND_RUNTIME, launch, 1), _api(layouts.KIND_RUNTIME, get_device, 2),
            _kernel(ptrs[1], 20_000, 3), _kernel(ptrs[0], 30_000, 4)]
    buf = b"".join(r.tobytes() for r in recs)
    sink.configure([layouts.KIND_CONCURRENT_KERNEL, layouts.KIND_RUNTIME])
    sink.set_api_filter(cbids.RUNTIME, cbids.DRIVER)
    sink.feed_plain(buf)
    # the pointed-to strings may go away now: the sink copied them
    del names
    kern = decode.records(sink.take(layouts.KIND_CONCURRENT_KERNEL), layouts.KERNEL)
    api = decode.records(sink.take(layouts.KIND_RUNTIME), layouts.API)
    blob, first = sink.take_strings()
    table = decode.StringTable()
    # earlier tests in this process may have interned strings: pad the table to `first`
    table.strings.extend([""] * first)
    table.extend(blob, first)
    assert len(kern) == 3 and len(api) == 1
    assert api["cbid"][0] == launch
    names_out = [table.strings[i - 1] for i in kern["name"]]
    assert names_out == ["_Z6kernelPf", "other_kernel", "_Z6kernelPf"]
    assert kern["name"][0] == kern["name"][2]  # interned once
    st = sink.stats()
    assert st["api_filtered"] == 1
    assert st["kept"][layouts.KIND_CONCURRENT_KERNEL] == 3
    assert sink.take(layouts.KIND_CONCURRENT_KERNEL).size == 0  # drained
    tbl = decode.decode_kernels(kern, table)
    assert tbl.column("name").to_pylist() == ["kernel(float*)", "other_kernel", "kernel(float*)"]


def test_sink_drops_when_full(sink) -> None:
    sink.reset()
    sink.configure([layouts.KIND_RUNTIME])
    sink.set_limits(0, 0, 40 * 3)  # room for three API records
    launch = next(k for k, v in cbids.RUNTIME.items() if v == "cudaLaunchKernel")
    sink.set_api_filter([launch], [])
    sink.feed_plain(b"".join(_api(layouts.KIND_RUNTIME, launch, i).tobytes() for i in range(5)))
    assert sink.take(layouts.KIND_RUNTIME).size == 3 * 40
    assert sink.stats()["dropped_sink"] == 2
    sink.set_limits(0, 0, 1 << 30)
    sink.reset()


def test_buffer_size_change_never_hands_out_a_smaller_pooled_buffer(sink) -> None:
    """A buffer pooled at one size must not go back to CUPTI announced with a larger one."""
    lib = sink.lib
    libc = ctypes.CDLL(None)
    libc.malloc_usable_size.restype, libc.malloc_usable_size.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    u8p = ctypes.POINTER(ctypes.c_uint8)

    def request() -> tuple[object, int]:
        buf, size = u8p(), ctypes.c_size_t(0)
        lib.ps_test_request(ctypes.byref(buf), ctypes.byref(size))
        assert buf and size.value > 0
        # CUPTI writes up to `size` bytes into the buffer
        assert libc.malloc_usable_size(ctypes.cast(buf, ctypes.c_void_p)) >= size.value
        return buf, size.value

    try:
        sink.set_limits(4096, 64, 0)
        old = [request() for _ in range(3)]
        sink.set_limits(1 << 16, 0, 0)
        new = [request() for _ in range(2)]  # the pool holds nothing of the old size
        for buf, size in old:  # buffers CUPTI still held at the change come back now
            lib.ps_test_complete(buf, size, 0)
        new += [request() for _ in range(3)]
        assert all(size == 1 << 16 for _, size in new)
        for buf, size in new:
            lib.ps_test_complete(buf, size, 0)
    finally:
        sink.set_limits(8 << 20, 64, 1 << 30)
        sink.reset()


def test_plain_walk_stops_at_a_record_cut_by_the_buffer_end(sink) -> None:
    sink.reset()
    sink.configure([layouts.KIND_RUNTIME])
    launch = next(k for k, v in cbids.RUNTIME.items() if v == "cudaLaunchKernel")
    sink.set_api_filter([launch], [])
    one = _api(layouts.KIND_RUNTIME, launch, 1).tobytes()
    sink.feed_plain(one + one[:12])  # the second record is cut short: not read past the end
    assert sink.take(layouts.KIND_RUNTIME).size == len(one)
    assert sink.stats()["kept"][layouts.KIND_RUNTIME] == 1
    sink.reset()


def test_configure_rejects_string_offsets_outside_the_record(sink) -> None:
    assert sink.lib.ps_configure(layouts.KIND_RUNTIME, 40, 36, -1) == -1
    assert sink.lib.ps_configure(layouts.KIND_RUNTIME, 40, -1, 33) == -1
    sink.reset()


def test_string_table_is_bounded(sink) -> None:
    """Unique names (an NVTX range per step) must not grow the string table without end."""
    sink.reset()
    sink.take_strings()
    sink.configure([layouts.KIND_MARKER])
    before = sink.stats()["strings_dropped"]
    sink.set_limits(0, 0, 1024)
    try:
        names = [ctypes.create_string_buffer(f"step {i} ".encode() * 60) for i in range(6)]  # ~500 bytes each
        recs = np.zeros(len(names), layouts.MARKER)
        recs["kind"] = layouts.KIND_MARKER
        recs["name"] = [ctypes.addressof(n) for n in names]
        sink.feed_plain(recs.tobytes())
        assert sink.take(layouts.KIND_MARKER).size == len(names) * layouts.MARKER.itemsize  # records kept
        blob, _ = sink.take_strings()
        assert 0 < len(blob) <= 1024
        assert sink.stats()["strings_dropped"] - before == len(names) - blob.count(b"\0")
    finally:
        sink.set_limits(0, 0, 1 << 30)
        sink.reset()


def test_api_callback_records_decode_like_activity_records(sink) -> None:
    """Records the sink makes in CUPTI's API callback have the CUpti_ActivityAPI layout:
    the same decoder reads them, with the call's correlation id, thread and return value."""
    import os
    import threading
    import time

    sink.reset()
    sink.configure([layouts.KIND_RUNTIME, layouts.KIND_DRIVER])
    launch = next(k for k, v in cbids.RUNTIME.items() if v == "cudaLaunchKernel")
    sync = next(k for k, v in cbids.DRIVER.items() if v == "cuCtxSynchronize")
    before = time.time_ns()
    sink.test_api_call(2, launch, 41)
    sink.test_api_call(2, launch, 42, ret=700)
    tids: list[int] = []

    def other_thread() -> None:
        tids.append(threading.get_native_id())
        sink.test_api_call(1, sync, 43)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    after = time.time_ns()
    rt = decode.records(sink.take(layouts.KIND_RUNTIME), layouts.API)
    drv = decode.records(sink.take(layouts.KIND_DRIVER), layouts.API)
    assert rt["kind"].tolist() == [layouts.KIND_RUNTIME] * 2 and drv["kind"].tolist() == [layouts.KIND_DRIVER]
    assert rt["cbid"].tolist() == [launch, launch] and drv["cbid"].tolist() == [sync]
    assert rt["correlation_id"].tolist() == [41, 42] and drv["correlation_id"].tolist() == [43]
    assert rt["return_value"].tolist() == [0, 700]
    assert set(rt["process_id"].tolist()) == {os.getpid()}
    assert set(rt["thread_id"].tolist()) == {threading.get_native_id()} and drv["thread_id"].tolist() == tids
    # no libcupti here: CLOCK_REALTIME, the clock CUPTI stamps with on Linux
    for r in (rt, drv):
        assert (r["start"] <= r["end"]).all() and r["start"].min() >= before and r["end"].max() <= after
    stats = sink.stats()
    assert stats["seen"][layouts.KIND_RUNTIME] == 2 and stats["kept"][layouts.KIND_DRIVER] == 1
    assert sink.api_stats() == {"api_records": 3, "api_dropped": 0}


def test_driver_calls_inside_a_runtime_call_are_not_recorded_twice(sink) -> None:
    sink.reset()
    sink.configure([layouts.KIND_RUNTIME, layouts.KIND_DRIVER])
    launch = next(k for k, v in cbids.RUNTIME.items() if v == "cudaLaunchKernel")
    cu_launch = next(k for k, v in cbids.DRIVER.items() if v == "cuLaunchKernel")
    sink.test_api_call(2, launch, 10, nested_driver_cbid=cu_launch)  # the runtime's own driver call
    sink.test_api_call(1, cu_launch, 20)  # a library's direct driver launch (cuBLAS, Triton)
    sink.test_api_call(2, launch, 30)
    rt = decode.records(sink.take(layouts.KIND_RUNTIME), layouts.API)
    drv = decode.records(sink.take(layouts.KIND_DRIVER), layouts.API)
    assert rt["correlation_id"].tolist() == [10, 30] and drv["correlation_id"].tolist() == [20]


def test_api_callback_records_need_a_configured_kind_and_respect_the_limit(sink) -> None:
    rec = layouts.API.itemsize
    sink.reset()
    sink.configure([layouts.KIND_CONCURRENT_KERNEL])  # runtime not configured: records go nowhere
    sink.test_api_call(2, 211, 1)
    assert sink.take(layouts.KIND_RUNTIME).size == 0
    assert sink.stats()["dropped_sink"] == 1
    sink.reset()
    sink.configure([layouts.KIND_RUNTIME])
    sink.set_limits(0, 0, 16 * rec)  # the buckets: 16 records; the staging area: a quarter
    merge = lambda: sink.lib.ps_pending(layouts.KIND_RUNTIME)  # noqa: E731 - a drain moves staged records
    try:
        for corr in range(6):
            sink.test_api_call(2, 211, corr)
        assert sink.api_stats() == {"api_records": 4, "api_dropped": 2}  # staging full at 4
        merge()
        for batch in range(3):  # 4 + 4 + 2 more: 14 of 16 in the bucket
            for corr in range(4 if batch < 2 else 2):
                sink.test_api_call(2, 211, 100 * (batch + 1) + corr)
            merge()
        assert merge() == 14 * rec and sink.stats()["dropped_sink"] == 0
        for corr in range(4):  # 2 fit, 2 do not: the ones that fit are kept, not the batch dropped
            sink.test_api_call(2, 211, 900 + corr)
        assert merge() == 16 * rec and sink.stats()["dropped_sink"] == 2
        got = decode.records(sink.take(layouts.KIND_RUNTIME), layouts.API)["correlation_id"].tolist()
        assert got == [0, 1, 2, 3, 100, 101, 102, 103, 200, 201, 202, 203, 300, 301, 900, 901]
    finally:
        sink.set_limits(0, 0, 1 << 30)
        sink.reset()


def test_api_calls_cut_by_a_session_boundary_are_not_recorded(sink) -> None:
    """A runtime call still running when recording stops never exits in that session: the
    next session must still record its thread's direct driver calls, and an exit whose enter
    came before the session (an unwritten start time) is no record."""
    sink.reset()
    sink.configure([layouts.KIND_RUNTIME, layouts.KIND_DRIVER])
    sync = next(k for k, v in cbids.RUNTIME.items() if v == "cudaStreamSynchronize")
    cu_launch = next(k for k, v in cbids.DRIVER.items() if v == "cuLaunchKernel")
    sink.test_new_session()
    sink.test_api_half(2, sync, 1, exit=False)  # enters, then the session ends
    sink.test_new_session()
    sink.test_api_half(2, sync, 1, exit=True)  # its exit, in the new session: no record
    sink.test_api_call(1, cu_launch, 2)  # a library's driver launch on the same thread: recorded
    assert decode.records(sink.take(layouts.KIND_RUNTIME), layouts.API).size == 0
    assert decode.records(sink.take(layouts.KIND_DRIVER), layouts.API)["correlation_id"].tolist() == [2]


def test_subscribe_needs_cuptis_callback_api(sink) -> None:
    # ps_open() was never given a libcupti here, so there is no cuptiSubscribe to call
    assert sink.subscribe() == -1
    assert sink.enable_api(2, [211, 13]) == 2  # not subscribed: every id refused
    assert sink.unsubscribe() == 0


_FAKE_CUPTI = r"""
#include <stddef.h>
#include <stdint.h>
static int flushes = 0;
int cuptiActivityRegisterCallbacks(void *req, void *done) { (void)req; (void)done; return 0; }
int cuptiActivityGetNextRecord(uint8_t *b, size_t n, void **r) { (void)b; (void)n; (void)r; return 1; }
int cuptiActivityFlushAll(uint32_t flag) { (void)flag; return ++flushes, 0; }
int fake_flushes(void) { return flushes; }
"""

_DETACH_CHECK = """
import ctypes, sys
from perfscope.collectors.cupti import native
native.use_library(sys.argv[2] if len(sys.argv) > 2 else None)
fake = ctypes.CDLL(sys.argv[1])
s = native.Sink()
s.open(sys.argv[1])
counts = []
s.flush(); counts.append(fake.fake_flushes())
s.set_detached(True)
s.flush(forced=True); counts.append(fake.fake_flushes())
s.reset()  # a new recording attaches again
s.flush(); counts.append(fake.fake_flushes())
print(counts)
"""


def test_a_detached_sink_makes_no_cupti_call(sink, tmp_path) -> None:
    """While CUPTI is finalized (between windows with detach) a flush must not reach CUPTI:
    any CUPTI call attaches it to the process again.  A fake libcupti counts the calls; the
    check runs in its own process, as ps_open() binds the sink to a library for good."""
    import shutil
    import subprocess
    import sys

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fake_cupti.c"
    src.write_text(_FAKE_CUPTI)
    lib = tmp_path / "libfakecupti.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    args = [sys.executable, "-c", _DETACH_CHECK, str(lib)]
    if os.environ.get("PERFSCOPE_CUPTI_SINK"):
        args.append(os.environ["PERFSCOPE_CUPTI_SINK"])
    out = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    # flushes reaching CUPTI: attached 1, detached still 1, attached again by reset 2
    assert out.stdout.strip().splitlines()[-1] == "[1, 1, 2]"
