"""Shared harness of the scenario workloads: one injected bottleneck each.

Every scenario is a plain training loop that calls ``step_done()`` after each optimizer
step.  How it is profiled is chosen from outside, so the same script serves every
recorder:

* ``SCENARIO_PROFILER=torch``: torch.profiler (CPU + CUDA), the Kineto trace of each rank is
  written to ``$SCENARIO_OUT/<scenario>_rank<R>.json`` (then ``perfscope import kineto``);
* ``SCENARIO_PROFILER=none`` (default): no profiler in the script, for
  ``perfscope record -- python scenario.py`` (no code changes).

``SCENARIO_STEPS`` (default 6) sets how many steps run after 2 warm-up steps.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

WARMUP = 2


def steps() -> int:
    """Number of measured steps."""
    return int(os.environ.get("SCENARIO_STEPS", "6"))


def rank() -> int:
    """This process's rank (RANK from torchrun, else 0)."""
    return int(os.environ.get("RANK", "0"))


def device() -> torch.device:
    """The CUDA device (one GPU shared by every rank on the device machine)."""
    if not torch.cuda.is_available():
        sys.exit("this scenario needs a CUDA GPU")
    return torch.device("cuda", 0)


@contextlib.contextmanager
def profiled(name: str) -> Iterator["StepMarker"]:
    """Profile the loop inside as the environment asks; yields the step marker."""
    mode = os.environ.get("SCENARIO_PROFILER", "none")
    marker = StepMarker()
    if mode != "torch":
        yield marker
        return
    from torch.profiler import ProfilerActivity, profile, schedule

    out = Path(os.environ.get("SCENARIO_OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}_rank{rank()}.json"
    prof = profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=WARMUP, active=steps(), repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    )
    with prof:
        marker.prof = prof
        yield marker


class StepMarker:
    """Calls ``prof.step()`` when a torch profiler is active."""

    prof = None

    def __call__(self) -> None:
        if self.prof is not None:
            self.prof.step()


def optimize(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One plain optimizer step: zero the gradients, back-propagate ``loss``, step."""
    opt.zero_grad()
    loss.backward()
    opt.step()


def total_iterations() -> int:
    """Warm-up plus measured steps."""
    return WARMUP + steps()


def init_distributed() -> None:
    """Join the NCCL process group (ranks share one GPU: each claims its own NCCL host)."""
    import torch.distributed as dist

    os.environ.setdefault("NCCL_HOSTID", f"host{rank()}")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_IB_DISABLE", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
