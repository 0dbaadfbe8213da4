"""The recorder: drives the collectors of a recording process and of ``perfscope record``.

* :mod:`.profiler`: :class:`Profiler` and :func:`profile` (in-process recording);
* :mod:`.driver`: :class:`CollectorSet`, which starts, flushes and stops the
  collectors of :data:`perfscope.collectors.registry.REGISTRY` by phase;
* :mod:`.runs`: creating or joining the run directory, the job's run id;
* :mod:`.rankmeta`: what a rank writes about itself into ``ranks/rank-N.json``;
* :mod:`.state`: the one active profiler of the process, forked children, warnings;
* :mod:`.flusher`: the background thread that writes a rank every flush interval;
* :mod:`.annotate`: :func:`annotate` (NVTX ranges and ``markers`` rows);
* :mod:`.inject`: the ``sitecustomize`` that ``perfscope record`` injects into the job.

The launcher itself is :mod:`perfscope.launch`; options are :mod:`perfscope.options`.
"""
