"""A small JAX training loop for tests/gpu/test_jax_record_gpu.py (never imports torch).

An MLP trained with ``jax.jit``: each measured step is a ``jax.profiler.StepTraceAnnotation``
(and an NVTX range ``jax_step``, domain ``jax_workload``, when the ``nvtx`` package is installed) holding a
host-to-device batch copy, the jitted update and the loss read back (a device-to-host copy
the host waits for).  ``--trace`` runs ``jax.profiler.start_trace``/``stop_trace`` around
two steps.  Writes ``{"steps", "nvtx", "torch_imported", "steps_ns": [[start, end], ...]}``
to ``--summary``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

try:
    import nvtx
except ImportError:
    nvtx = None


def loss_fn(p: tuple[jax.Array, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jnp.tanh(x @ p[0]) @ p[1] - y) ** 2)


@jax.jit
def train_step(p: tuple[jax.Array, jax.Array], x: jax.Array, y: jax.Array) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return (p[0] - 0.01 * g[0], p[1] - 0.01 * g[1]), loss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--summary", required=True)
    a = ap.parse_args()
    key = jax.random.PRNGKey(0)
    params = (jax.random.normal(key, (512, 512)) * 0.01, jax.random.normal(key, (512, 8)) * 0.01)
    xs = np.random.rand(1024, 512).astype(np.float32)
    ys = np.random.rand(1024, 8).astype(np.float32)
    spans = []
    trace_dir = tempfile.mkdtemp(prefix="jaxtrace-")
    for i in range(a.warmup + a.steps):
        measured = i >= a.warmup
        k = i - a.warmup
        if a.trace and k == 2:
            jax.profiler.start_trace(trace_dir)
        t0 = time.time_ns()
        with contextlib.ExitStack() as stack:
            if measured:
                stack.enter_context(jax.profiler.StepTraceAnnotation("train", step_num=k))
                if nvtx is not None:
                    # A named domain: ranges of nvtx's default domain did not reach CUPTI in
                    # this process on the H200 (XLA's own, domain TSL, did).
                    stack.enter_context(nvtx.annotate("jax_step", domain="jax_workload"))
            params, loss = train_step(params, jax.device_put(xs), jax.device_put(ys))
            float(loss)
        if measured:
            spans.append([t0, time.time_ns()])
        if a.trace and k == 3:
            jax.profiler.stop_trace()
    with open(a.summary, "w") as f:
        json.dump({"steps": a.steps, "nvtx": nvtx is not None, "torch_imported": "torch" in sys.modules,
                   "steps_ns": spans}, f)


if __name__ == "__main__":
    main()
