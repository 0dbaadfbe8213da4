"""Every collector the recorder can run, keyed by the record option that turns it on.

The key is a boolean field of :class:`perfscope.options.RecordOptions` (and so a keyword of
``perfscope.profile`` and a ``--no-...`` flag of ``perfscope record``); the order is the
order collectors start in.  Adding a collector is one module implementing
:class:`perfscope.collectors.base.Collector` plus one line here (see CONTRIBUTING.md).
"""
from __future__ import annotations

from perfscope.collectors.base import CollectorSpec

REGISTRY: dict[str, CollectorSpec] = {
    "host_hooks": CollectorSpec("host", "perfscope.collectors.host.hooks:HostHooks", "process"),
    "nccl": CollectorSpec("nccl", "perfscope.collectors.nccl.recording:NcclRecording", "job"),
    "cupti": CollectorSpec("cupti", "perfscope.collectors.cupti.recording:CuptiRecording", "window"),
    "nvml": CollectorSpec("nvml", "perfscope.collectors.host.nvml:NvmlRecording", "window"),
}

__all__ = ["REGISTRY"]
