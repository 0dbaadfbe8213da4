"""Taking CUPTI for a recording: its one subscriber slot, the API records it should not
make, and a synchronised GPU before a forced flush.  The collector (:mod:`.collector`)
calls these at start, and again when it attaches CUPTI after a detach (``cuptiFinalize``
forgets the subscription and the per-call-id switches)."""
from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterable
from typing import Any

from perfscope.collectors.cupti import cbids, layouts, probe
from perfscope.errors import CuptiUnavailableError

SUBSCRIBER_NAME = "perfscope"
ERROR_MULTIPLE_SUBSCRIBERS = 39  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED


def sync_current_context() -> None:
    """cuCtxSynchronize() on this thread's current context, if there is one (so no kernel
    is still running when the last buffers are force-flushed)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return
    ctx = ctypes.c_void_p(0)
    if cuda.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and ctx.value:
        cuda.cuCtxSynchronize()


def take_slot(cupti: Any, warnings: list[str]) -> Any:
    """Claim CUPTI's one subscriber slot so that tools starting later see perfscope.

    A slot held by torch's Kineto while torch.profiler is idle (Kineto keeps its
    subscription after its first use) is no conflict for the activity API; a slot
    held by anything else is.

    Returns:
        The subscriber handle (as cupti-python gives it), or None when an idle Kineto holds the slot (a warning is
        appended to ``warnings``; records then come through the activity API alone).

    Raises:
        CuptiUnavailableError: another tool holds the slot, or cuptiSubscribe failed.
    """
    tool = probe.external_tool()
    params: Any = None
    try:
        params = cupti.SubscriberParams()
        params.struct_size = cupti.SUBSCRIBER_PARAMS_SIZE
        params.subscriber_name = SUBSCRIBER_NAME
    except Exception:  # noqa: BLE001 - fall back to the unnamed subscribe below
        params = None
    holder = ""
    try:
        if params is not None:
            return cupti.subscribe_v2(_no_callback, 0, params.ptr)
        return cupti.subscribe(_no_callback, 0)
    except cupti.cuptiError as e:
        try:
            holder = str(params.old_subscriber_name or "") if params is not None else ""
        except Exception:  # noqa: BLE001
            holder = ""
        if "MULTIPLE" not in str(e) and str(ERROR_MULTIPLE_SUBSCRIBERS) not in str(e):
            raise CuptiUnavailableError(f"cuptiSubscribe failed: {e}") from None
    if tool is None and "torch" in sys.modules and not probe.torch_profiler_active():
        warnings.append(
            f"CUPTI subscriber slot is held by {holder or 'another client'} (torch's Kineto keeps it after a "
            "torch.profiler session); recording through the activity API anyway"
        )
        return None
    who = holder or tool or "another CUPTI client"
    raise CuptiUnavailableError(
        f"CUPTI is already in use by {who} and this driver allows one CUPTI client per process; "
        "record without it, or use that tool's trace (`perfscope import kineto` reads torch.profiler traces)"
    )


def filter_api(cupti: Any, enabled: Iterable[int]) -> None:
    """Stop CUPTI from making records for API calls that neither launch, copy nor
    synchronise (cudaGetDevice and friends, thousands per step), for the RUNTIME/DRIVER
    kinds among the ``enabled`` activity kinds.

    The RUNTIME/DRIVER kinds trace every call; CUPTI's per-call-id switch then turns
    single ids off.  (Its documented other use, tracing chosen ids without the kind,
    recorded nothing with libcupti 13.0.85 on the H200.)  The sink filters too, in case
    a switch fails.  Enabling the kind again (the next session, torch.profiler) resets
    the switches, so stop() only disables the kind.
    """
    enabled = set(enabled)
    plan = []
    if layouts.KIND_RUNTIME in enabled:
        plan.append((cbids.RUNTIME_CBID_SIZE, cbids.RUNTIME, cupti.activity_enable_runtime_api))
    if layouts.KIND_DRIVER in enabled:
        plan.append((cbids.DRIVER_CBID_SIZE, cbids.DRIVER, cupti.activity_enable_driver_api))
    for size, keep, fn in plan:
        for cbid in range(1, size):
            if cbid not in keep:
                try:
                    fn(cbid, 0)
                except Exception:  # noqa: BLE001 - the sink's filter still applies
                    break


def _no_callback(*_args: Any) -> None:
    """Callback for the subscription: perfscope enables no callbacks, so it never runs."""
