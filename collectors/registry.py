"""Every collector the recorder can run, in start order, with the record option that turns it on.

The option is a boolean field of :class:`perfscope.options.RecordOptions` (and so a keyword
of ``perfscope.profile`` and a ``--no-...`` flag of ``perfscope record``); several collectors
may share one.  Adding a collector is one module implementing
:class:`perfscope.collectors.base.Collector` plus one line here (see CONTRIBUTING.md).
"""
from __future__ import annotations

from perfscope.collectors.base import CollectorSpec

REGISTRY: tuple[CollectorSpec, ...] = (
    CollectorSpec("host", "perfscope.collectors.host.hooks:HostHooks", "process", option="host_hooks"),
    CollectorSpec("nccl", "perfscope.collectors.nccl.recording:NcclRecording", "job", option="nccl"),
    # decodes the CUPTI collector's segment files outside the training processes
    CollectorSpec("cupti_decode", "perfscope.collectors.cupti.decoding:CuptiDecoding", "job", option="cupti"),
    # sets the NCCL plugin's level to 0 in the training process between a schedule's windows
    CollectorSpec("nccl_window", "perfscope.collectors.nccl.recording:NcclWindow", "window", option="nccl", pausable=True),
    CollectorSpec("cupti", "perfscope.collectors.cupti.recording:CuptiRecording", "window", option="cupti", pausable=True),
    CollectorSpec("nvml", "perfscope.collectors.host.nvml:NvmlRecording", "window", option="nvml", pausable=True),
)

__all__ = ["REGISTRY"]
