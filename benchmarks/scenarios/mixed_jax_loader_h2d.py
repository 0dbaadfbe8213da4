"""Mixed-cause ground truth without PyTorch: a JAX training step with a slow loader (10 ms of
sleep per batch) and a 128 MiB host-to-device copy from pinned host memory.

Steps are ``jax.profiler.StepTraceAnnotation`` ranges (perfscope's JAX hook turns them into
steps); 2 warm-up iterations (compilation) run outside them, then ``SCENARIO_STEPS + 1``
annotated steps, whose windows (entry to exit) and injected costs go to ``$MIXED_TRUTH``
(mixed_truth.py):

* ``loader``: ``time.sleep`` in the batch iterator; the cost is ``perf_counter`` around
  ``next(loader)``.  JAX has no loader perfscope could hook, so the GPU-idle wait is
  ``host``; finding ``host.overhead``.
* ``h2d``: ``jax.device_put`` of a 128 MiB array held in pinned host memory (memory kind
  ``pinned_host``) onto the GPU, then ``block_until_ready``; the cost is ``perf_counter``
  around both.  A DMA copy with nothing else running: ``pcie`` (``sync`` holds the host's
  wait once the copy is done); finding ``pcie.exposed``.

Never imports torch.
"""
from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import mixed_truth

NAME = "mixed_jax_loader_h2d"
SPEC = {"loader": 10.0, "h2d": 128.0}  # ms of sleep per batch, MiB copied
KINDS: dict[str, tuple[list[str], str | None]] = {
    "loader": (["host"], "host.overhead"),
    "h2d": (["pcie", "sync"], "pcie.exposed"),
}
WARMUP = 2


def batches(sleep_s: float):
    """A data loader: every batch takes ``sleep_s`` of (sleeping) CPU time."""
    rng = np.random.default_rng(0)
    while True:
        time.sleep(sleep_s)
        yield rng.standard_normal((64, 256), dtype=np.float32)


@jax.jit
def train_step(w: jax.Array, x: jax.Array, big: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One SGD step of a linear model on ``x`` (``big`` only keeps the copy in the step)."""
    def loss_fn(w: jax.Array) -> jax.Array:
        return jnp.mean(jnp.square(x @ w)) + 0.0 * big[0]
    loss, grad = jax.value_and_grad(loss_fn)(w)
    return w - 0.01 * grad, loss


def main() -> None:
    dev = jax.devices()[0]
    on_device = jax.sharding.SingleDeviceSharding(dev, memory_kind="device")
    pinned = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")
    host = jax.device_put(np.ones(int(SPEC["h2d"] * 2**20 / 4), np.float32), pinned)
    host.block_until_ready()
    loader = batches(SPEC["loader"] / 1e3)
    w = jnp.zeros((256, 256), jnp.float32)
    windows = []
    n = int(os.environ.get("SCENARIO_STEPS", "6")) + 1
    for i in range(WARMUP + n):
        annotate = i >= WARMUP
        ctx = jax.profiler.StepTraceAnnotation("train", step_num=i - WARMUP) if annotate else None
        t0 = time.perf_counter()
        if ctx is not None:
            ctx.__enter__()
        t = time.perf_counter()
        x = next(loader)
        loader_s = time.perf_counter() - t
        t = time.perf_counter()
        big = jax.device_put(host, on_device)
        big.block_until_ready()
        h2d_s = time.perf_counter() - t
        w, loss = train_step(w, x, big)
        float(loss)  # the loss read back: a small device-to-host copy
        if ctx is not None:
            ctx.__exit__(None, None, None)
            windows.append({"wall_ms": (time.perf_counter() - t0) * 1e3,
                            "costs_ms": {"loader": loader_s * 1e3, "h2d": h2d_s * 1e3}})
    mixed_truth.write_truth(NAME, SPEC, windows, KINDS,
                            {"gpu": getattr(dev, "device_kind", str(dev)), "jax": jax.__version__})


if __name__ == "__main__":
    main()
