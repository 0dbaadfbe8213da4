"""Write the small synthetic Kineto traces under ``tests/data/kineto/``.

Run ``python tests/data/make_fixtures.py`` to regenerate them (deterministic: same bytes
every time).  They imitate what ``torch.profiler`` writes for a DDP job on two H100s:

``ddp_rank0.json.gz`` / ``ddp_rank1.json.gz``
    ranks 0 and 1 of a 2-rank DDP job (``distributedInfo``, ``baseTimeNanoseconds`` with
    relative µs timestamps), three ``ProfilerStep#10..12`` ranges that enclose every
    launch of their step; per step: a data-loader wait, a pageable H2D copy of the batch
    and a pinned H2D copy of the labels, a memset, forward and backward kernels on the
    compute stream (7), two DDP bucket all-reduces and (step 10 only) a buffer broadcast as
    ``record_param_comms`` ops with their ``nccl:*`` annotations and NCCL kernels on the
    NCCL stream (20), a ``cudaStreamWaitEvent`` (cuda_sync "Stream Wait Event"), the
    optimizer step, and a ``cudaStreamSynchronize`` at the end (cuda_sync "Stream Sync").
    Rank 1 loads its batch more slowly in step 11, so rank 0 waits in that step's first
    all-reduce (a straggler).  The NCCL kernels carry no collective arguments (as in
    PyTorch < 2.3), so importers must link them to ``record_param_comms``.
``single_gpu_absolute.json``
    one rank, no ``distributedInfo``, absolute epoch-µs timestamps with nanosecond decimals
    (as ``ns_resolution_trace_rank-0`` has), newer Kineto style with collective arguments
    copied onto the NCCL kernel, an ``Event Sync`` and a ``Context Sync``.

Expected counts live in :data:`EXPECTED` (tests read them).
"""
from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "kineto"
BASE_NS = 1_733_126_400_000_000_000  # 2024-12-02T08:00:00Z
H100 = {
    "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912, "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448,
}

K_ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
         "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
K_RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
          "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()"
          " const::{lambda()#7}::operator() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
          "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
          "at::native::detail::ClampLimits)::{lambda()#1}::operator() const::{lambda()#7}::operator() const::"
          "{lambda(float)#1}, at::detail::Array<char*, 2>)")
K_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
K_GEMM_BW = "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
K_SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
K_NLL = "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"
K_SGD = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
         "TensorListMetadata<2>, at::native::(anonymous namespace)::FusedSgdMathFunctor<float, 2>, float, double>("
         "at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
         "FusedSgdMathFunctor<float, 2>, float, double)")
K_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
K_BC = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

#: What the fixtures hold (tests compare imports against these).
EXPECTED: dict[str, dict[str, int]] = {}


class _Trace:
    """Builds one rank's events on a nanosecond clock and writes Kineto JSON."""

    def __init__(self, rank: int, *, pid: int, device: int, absolute: bool, seed: int) -> None:
        self.rank, self.pid, self.device, self.absolute = rank, pid, device, absolute
        self.tid_main, self.tid_bwd = pid, pid + 17
        self.rng = random.Random(seed)
        self.events: list[dict[str, Any]] = []
        self.ext = 100
        self.corr = 5000
        self.gpu_free = {7: 0, 20: 0}  # when each stream is next idle (ns)
        self.counts = {"kernel": 0, "gpu_memcpy": 0, "gpu_memset": 0, "cuda_sync": 0, "cuda_runtime": 0,
                       "nccl": 0, "steps": 0, "user_annotation": 0, "gpu_user_annotation": 0}

    # -- time formatting -----------------------------------------------------------------
    def us(self, ns: int) -> str:
        """A timestamp as Kineto writes it: µs with three decimals (epoch µs when absolute).

        Returned as a placeholder string that :func:`_write` turns into a bare JSON number,
        because a float cannot hold epoch µs to the nanosecond.
        """
        return _num(ns if self.absolute else ns - BASE_NS)

    def x(self, cat: str, name: str, pid: Any, tid: Any, start: int, dur: int, args: dict[str, Any] | None = None) -> dict[str, Any]:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": self.us(start), "dur": _num(dur)}
        if args is not None:
            e["args"] = args
        self.events.append(e)
        if cat in self.counts:
            self.counts[cat] += 1
        return e

    def next_ext(self) -> int:
        self.ext += 1
        return self.ext

    # -- building blocks -----------------------------------------------------------------
    def cpu_op(self, name: str, tid: int, start: int, dur: int, dims: list[Any] | None = None) -> int:
        ext = self.next_ext()
        args: dict[str, Any] = {"External id": ext, "Record function id": 0, "Ev Idx": ext - 100}
        if dims is not None:
            args["Input Dims"] = dims
            args["Input type"] = ["float"] * len(dims)
        self.x("cpu_op", name, self.pid, tid, start, dur, args)
        return ext

    def launch(self, ext: int, tid: int, t: int, api: str = "cudaLaunchKernel", cbid: int = 211) -> tuple[int, int]:
        """A runtime call at ``t`` on thread ``tid``; returns (correlation, end of the call)."""
        self.corr += 1
        dur = self.rng.randint(3_000, 9_000)
        self.x("cuda_runtime", api, self.pid, tid, t, dur, {"External id": ext, "cbid": cbid, "correlation": self.corr})
        return self.corr, t + dur

    def flow(self, corr: int, host_tid: int, host_ts: int, stream: int, gpu_ts: int) -> None:
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": host_tid, "ts": self.us(host_ts), "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": self.device, "tid": stream, "ts": self.us(gpu_ts), "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def kernel(self, name: str, tid: int, t: int, dur: int, *, stream: int = 7, grid: tuple[int, int, int] = (264, 1, 1),
               block: tuple[int, int, int] = (128, 1, 1), regs: int = 32, smem: int = 0, extra: dict[str, Any] | None = None,
               op: str | None = None, dims: list[Any] | None = None, ext: int | None = None) -> tuple[int, int]:
        """An op (unless ``ext`` is given), its cudaLaunchKernel and the kernel; returns (host end, gpu end)."""
        if ext is None:
            ext = self.cpu_op(op or "aten::add", tid, t, 14_000, dims)
            t += 2_000
        corr, host_end = self.launch(ext, tid, t)
        start = max(host_end + 2_500, self.gpu_free[stream])
        args: dict[str, Any] = {
            "External id": ext, "queued": 0, "device": self.device, "context": 1, "stream": stream, "correlation": corr,
            "registers per thread": regs, "shared memory": smem, "blocks per SM": round(grid[0] / 132, 6),
            "warps per SM": round(grid[0] * block[0] / 32 / 132, 6), "grid": list(grid), "block": list(block),
            "est. achieved occupancy %": 50,
        }
        if extra:
            args.update(extra)
        self.x("kernel", name, self.device, stream, start, dur, args)
        self.flow(corr, tid, t, stream, start)
        self.gpu_free[stream] = start + dur
        return host_end, start + dur

    def memcpy(self, name: str, tid: int, t: int, nbytes: int, gbps: float) -> int:
        ext = self.cpu_op("aten::copy_", tid, t, 40_000, [[nbytes // 4], [nbytes // 4], []])
        corr, host_end = self.launch(ext, tid, t + 2_000, "cudaMemcpyAsync", 41)
        start = max(host_end + 1_500, self.gpu_free[7])
        dur = int(nbytes / gbps)  # bytes / (GB/s) = ns
        self.x("gpu_memcpy", name, self.device, 7, start, dur, {
            "External id": ext, "device": self.device, "context": 1, "stream": 7, "correlation": corr,
            "bytes": nbytes, "memory bandwidth (GB/s)": round(gbps, 6)})
        self.gpu_free[7] = start + dur
        # A pageable copy blocks the host until it is done.
        return max(host_end, start + dur) if "Pageable" in name else host_end

    def sync(self, kind: str, api: str, cbid: int, tid: int, t: int, stream: int, wait: int) -> int:
        ext = self.next_ext()
        corr, _ = self.launch(ext, tid, t, api, cbid)
        self.events[-1]["dur"] = _num(wait)
        args = {"External id": ext, "cuda_sync_kind": kind, "stream": stream, "correlation": corr, "device": self.device, "context": 1}
        if kind == "Stream Wait Event":
            args.update({"wait_on_stream": 20, "wait_on_cuda_event_record_corr_id": corr - 1})
        elif kind == "Event Sync":
            args["event_id"] = 3
        self.x("cuda_sync", kind, self.device, stream, t + 1_000, max(wait - 2_000, 500), args)
        return t + wait

    def collective(self, tid: int, t: int, func: str, nelems: int, kernel: str, dur: int, seq: int,
                   kernel_args: bool, wait_ns: int = 0) -> int:
        """record_param_comms + nccl:<func> annotation + launch + NCCL kernel; returns host end."""
        coll = {"allreduce": "nccl:all_reduce", "broadcast": "nccl:broadcast"}[func]
        rpc_ext = self.next_ext()
        rpc_args = {
            "External id": rpc_ext, "Record function id": 0, "Ev Idx": rpc_ext - 100, "Collective name": func,
            "dtype": "Float", "In msg nelems": nelems, "Out msg nelems": nelems, "In split size": "[]",
            "Out split size": "[]", "Global rank start": 0, "Global rank stride": 1, "Group size": 2,
            "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]",
            "seq": seq,
        }
        ann_ext = self.next_ext()
        launch_at = t + 9_000
        corr, host_end = self.launch(ann_ext, tid, launch_at)
        self.x("user_annotation", coll, self.pid, tid, t + 4_000, host_end - t - 2_000, {"External id": ann_ext, "Ev Idx": ann_ext - 100})
        self.x("cpu_op", "record_param_comms", self.pid, tid, t, host_end - t + 4_000, rpc_args)
        start = max(host_end + 3_000, self.gpu_free[20], self.gpu_free[7])
        args: dict[str, Any] = {
            "External id": ann_ext, "queued": 0, "device": self.device, "context": 1, "stream": 20, "correlation": corr,
            "registers per thread": 96, "shared memory": 87568, "blocks per SM": 0.015152, "warps per SM": 0.257576,
            "grid": [2, 1, 1], "block": [544, 1, 1], "est. achieved occupancy %": 0,
        }
        if kernel_args:
            args.update({k: rpc_args[k] for k in ("Collective name", "dtype", "In msg nelems", "Out msg nelems", "Group size",
                                                  "Process Group Name", "Process Group Description", "Process Group Ranks")})
        self.x("kernel", kernel, self.device, 20, start, dur + wait_ns, args)
        self.flow(corr, tid, launch_at, 20, start)
        self.gpu_free[20] = start + dur + wait_ns
        self.counts["nccl"] += 1
        return host_end + 4_000

    # -- a training step -----------------------------------------------------------------
    def step(self, n: int, t0: int, *, slow_data: int, straggle_wait: int, broadcast: bool, kernel_args: bool) -> int:
        tid, bwd = self.tid_main, self.tid_bwd
        events_before = len(self.events)
        t = t0 + 20_000
        # Data loading: host waits for the next batch.
        load = 1_800_000 + slow_data + self.rng.randint(0, 200_000)
        self.x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", self.pid, tid, t, load,
               {"External id": self.next_ext(), "Ev Idx": 0})
        t += load + 30_000
        t = self.memcpy("Memcpy HtoD (Pageable -> Device)", tid, t, 64 * 3 * 224 * 224 * 4 // 16, 6.5) + 20_000
        t = self.memcpy("Memcpy HtoD (Pinned -> Device)", tid, t, 64 * 8, 0.4) + 20_000
        if broadcast:
            t = self.collective(tid, t, "broadcast", 2049000, K_BC, 310_000, seq=n * 10, kernel_args=kernel_args)
        # Forward.
        fwd_start = t
        ext = self.next_ext()
        fwd_gpu_start = max(t + 15_000, self.gpu_free[7])
        self.x("user_annotation", "## forward ##", self.pid, tid, t, 1, {"External id": ext, "Ev Idx": 0})
        fwd_event = self.events[-1]
        t += 8_000
        ms_ext = self.cpu_op("aten::zero_", tid, t, 12_000)
        corr, host_end = self.launch(ms_ext, tid, t + 2_000, "cudaMemsetAsync", 51)
        ms_start = max(host_end + 1_000, self.gpu_free[7])
        self.x("gpu_memset", "Memset (Device)", self.device, 7, ms_start, 2_400, {
            "External id": ms_ext, "device": self.device, "context": 1, "stream": 7, "correlation": corr,
            "bytes": 1048576, "memory bandwidth (GB/s)": 436.906667})
        self.gpu_free[7] = ms_start + 2_400
        t = host_end + 5_000
        for layer in range(4):
            t, _ = self.kernel(K_GEMM, tid, t, 180_000 + 10_000 * layer, grid=(8, 8, 1), block=(384, 1, 1), regs=168,
                               smem=197632, op="aten::linear", dims=[[64, 4096], [4096, 4096], [4096]])
            t, _ = self.kernel(K_ADD, tid, t + 3_000, 21_000, op="aten::add")
            t, gpu_end = self.kernel(K_RELU, tid, t + 3_000, 19_000, op="aten::relu")
        t, _ = self.kernel(K_SOFTMAX, tid, t + 3_000, 35_000, grid=(64, 1, 1), block=(1024, 1, 1), op="aten::log_softmax")
        t, gpu_end = self.kernel(K_NLL, tid, t + 3_000, 12_000, grid=(1, 1, 1), block=(1024, 1, 1), op="aten::nll_loss")
        fwd_event["dur"] = _num(t - fwd_start)
        self.x("gpu_user_annotation", "## forward ##", self.device, 7, fwd_gpu_start, gpu_end - fwd_gpu_start, {"External id": ext})
        # Backward on the autograd thread; DDP all-reduces a bucket after every two layers.
        t_b = bwd_start = t + 25_000
        bwd_ext = self.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", bwd, t_b, 1)
        bwd_event = self.events[-1]
        t_b += 5_000
        for layer in range(4):
            t_b, _ = self.kernel(K_GEMM_BW, bwd, t_b, 350_000, grid=(16, 4, 1), block=(384, 1, 1), regs=168, smem=213248,
                                 op="aten::mm", dims=[[4096, 64], [64, 4096]])
            t_b, _ = self.kernel(K_GEMM_BW, bwd, t_b + 3_000, 340_000, grid=(16, 4, 1), block=(384, 1, 1), regs=168, smem=213248,
                                 op="aten::mm", dims=[[64, 4096], [4096, 4096]])
            if layer % 2 == 1:
                ev = self.sync("Stream Wait Event", "cudaStreamWaitEvent", 147, bwd, t_b + 2_000, 20, 6_000)
                t_b = self.collective(bwd, ev + 2_000, "allreduce", 2 * 4096 * 4096 + 2 * 4096, K_AR, 4_600_000,
                                      seq=n * 10 + layer, kernel_args=kernel_args,
                                      wait_ns=straggle_wait if layer == 1 else 0)
        bwd_event["dur"] = _num(t_b - bwd_start)
        del bwd_ext
        t = t_b + 30_000
        # Optimizer step.
        opt_start = t
        ext = self.next_ext()
        self.x("user_annotation", "Optimizer.step#SGD.step", self.pid, tid, t, 1, {"External id": ext, "Ev Idx": 0})
        opt = self.events[-1]
        t, _ = self.kernel(K_SGD, tid, t + 10_000, 420_000, grid=(320, 1, 1), block=(512, 1, 1), regs=40,
                           op="aten::_fused_sgd_")
        opt["dur"] = _num(t + 5_000 - opt_start)
        # The loss is read back: the host waits for the stream.
        wait = max(self.gpu_free[7], self.gpu_free[20]) - t + 50_000
        t = self.sync("Stream Sync", "cudaStreamSynchronize", 131, tid, t + 5_000, 7, max(wait, 20_000))
        t += 40_000
        self.x("user_annotation", f"ProfilerStep#{n}", self.pid, tid, t0, t - t0, {"External id": self.next_ext(), "Ev Idx": 0})
        self.counts["steps"] += 1
        self.counts["user_annotation"] -= 1  # ProfilerStep is a step, not a marker
        assert len(self.events) > events_before
        return t

    # -- output --------------------------------------------------------------------------
    def document(self, *, distributed: bool, world_size: int, start: int, end: int) -> dict[str, Any]:
        meta = [
            {"name": "process_name", "ph": "M", "ts": self.us(start), "pid": self.pid, "tid": 0, "args": {"name": "python3"}},
            {"name": "process_labels", "ph": "M", "ts": self.us(start), "pid": self.pid, "tid": 0, "args": {"labels": "CPU"}},
            {"name": "process_name", "ph": "M", "ts": self.us(start), "pid": self.device, "tid": 0, "args": {"name": "python3"}},
            {"name": "process_labels", "ph": "M", "ts": self.us(start), "pid": self.device, "tid": 0, "args": {"labels": f"GPU {self.device}"}},
            {"name": "thread_name", "ph": "M", "ts": self.us(start), "pid": self.pid, "tid": self.tid_main, "args": {"name": "thread 0 (python3)"}},
            {"name": "thread_name", "ph": "M", "ts": self.us(start), "pid": self.pid, "tid": self.tid_bwd, "args": {"name": "thread 1 (python3)"}},
            {"name": "thread_name", "ph": "M", "ts": self.us(start), "pid": self.device, "tid": 7, "args": {"name": "stream 7 "}},
            {"name": "thread_name", "ph": "M", "ts": self.us(start), "pid": self.device, "tid": 20, "args": {"name": "stream 20 "}},
            {"ph": "X", "cat": "Trace", "ts": self.us(start), "dur": _num(end - start), "pid": "Spans", "tid": "PyTorch Profiler",
             "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
            {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": self.us(start)},
        ]
        doc: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": i, **H100} for i in range(2)],
        }
        if distributed:
            doc["distributedInfo"] = {
                "backend": "nccl", "rank": self.rank, "world_size": world_size, "pg_count": 1,
                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": world_size,
                               "ranks": list(range(world_size))}], "nccl_version": "2.21.5"}
        doc["record_shapes"] = 1
        doc["with_stack"] = 0
        doc["traceEvents"] = sorted(self.events, key=lambda e: (float(e["ts"][2:]), e.get("ph") != "X")) + meta
        doc["traceName"] = f"/tmp/trace_rank{self.rank}.json"
        doc["displayTimeUnit"] = "ms"
        if not self.absolute:
            doc["baseTimeNanoseconds"] = BASE_NS
        return doc


def _num(ns: int) -> str:
    """ns -> placeholder for the JSON number ``<µs>.<3 digits>`` (see :func:`_write`)."""
    return f"@@{ns // 1000}.{ns % 1000:03d}"


def _write(name: str, doc: dict[str, Any]) -> Path:
    HERE.mkdir(parents=True, exist_ok=True)
    text = re.sub(r'"@@(\d+\.\d{3})"', r"\1", json.dumps(doc, separators=(", ", ": "))).encode()
    path = HERE / name
    if name.endswith(".gz"):
        # mtime=0 keeps the bytes identical from one run to the next.
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(text)
    else:
        path.write_bytes(text)
    return path


def make_ddp() -> list[Path]:
    """The two ranks of the DDP fixture."""
    paths = []
    for rank in (0, 1):
        tr = _Trace(rank, pid=41230 + rank, device=rank, absolute=False, seed=rank)
        t0 = BASE_NS + 2_000_000_000 + rank * 37_000
        t = t0
        for n in (10, 11, 12):
            slow = 3_000_000 if (rank == 1 and n == 11) else 0
            straggle = 2_900_000 if (rank == 0 and n == 11) else 0
            t = tr.step(n, t + 15_000, slow_data=slow, straggle_wait=straggle, broadcast=(n == 10), kernel_args=False)
        EXPECTED[f"ddp_rank{rank}"] = dict(tr.counts)
        paths.append(_write(f"ddp_rank{rank}.json.gz", tr.document(distributed=True, world_size=2, start=t0 - 100_000, end=t + 100_000)))
    return paths


def make_single() -> Path:
    """One rank, absolute ns-resolution timestamps, no distributedInfo, plain .json."""
    tr = _Trace(0, pid=777, device=0, absolute=True, seed=42)
    t0 = BASE_NS + 5_000_000_123
    tid = tr.tid_main
    t = tr.step(3, t0, slow_data=0, straggle_wait=0, broadcast=True, kernel_args=True)
    t = tr.sync("Event Sync", "cudaEventSynchronize", 132, tid, t + 10_000, 7, 30_000)
    t = tr.sync("Context Sync", "cudaDeviceSynchronize", 165, tid, t + 10_000, 7, 25_000)
    EXPECTED["single_gpu_absolute"] = dict(tr.counts)
    return _write("single_gpu_absolute.json", tr.document(distributed=False, world_size=1, start=t0 - 100_000, end=t + 100_000))


def main() -> None:
    """Write every fixture and print their sizes and expected counts."""
    for p in [*make_ddp(), make_single()]:
        print(f"{p.relative_to(HERE.parent.parent.parent)}: {p.stat().st_size:,} bytes")
    print(json.dumps(EXPECTED, indent=1))


if __name__ == "__main__":
    main()
