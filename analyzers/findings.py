"""Findings that are not advice rules: what the trace itself can tell (a CPU-only run, no GPU
activity records, a start-up window: :func:`trace_findings`) and the environment checks the
recorder's doctor stored in ``run.json`` (:func:`environment_recommendations`).  None of them
claims a saving.  :func:`~.rules.evaluate_rules` runs them beside the rules."""
from __future__ import annotations

from typing import Any

from perfscope.analyzers.result import Recommendation
from perfscope.analyzers.rule_context import RuleContext, _ms, _pct


def _no_gpu_records(ctx: RuleContext) -> bool:
    """True when the analysed windows hold no GPU activity at all (no kernel, copy or memset)."""
    s = ctx.steps
    return len(s) > 0 and "gpu_idle_ns" in s.columns and bool((ctx.column("steps", "gpu_idle_ns") >= ctx.column("steps", "wall_ns")).all())


def trace_findings(ctx: RuleContext) -> list[Recommendation]:
    """Findings about what the trace can tell, with no saving: a CPU-only run (no GPU records
    and no GPU named in the metadata), a GPU trace without activity records (CUPTI
    range-profiler mode, activities off), and windows dominated by start-up calls
    (context creation, ``cudaFree``, allocation: :mod:`~.api_calls`).  When one fires, the
    step rules do not run: their GPU-idle evidence would be an artefact of the trace."""
    s = ctx.steps
    if len(s) == 0:
        return []
    wall = ctx.median_step_ns
    if _no_gpu_records(ctx):
        if ctx.hw.gpu_present is not True:
            return [Recommendation(
                id="trace.cpu_only", bucket="trace", title="CPU-only run",
                message="The run records no GPU activity and names no GPU: it ran on the CPU. The step time is all host "
                        "time; profile the host code to see where it goes.",
                evidence={"median_step_ns": wall},
                change="py-spy record -o profile.svg -- python train.py  # or torch.profiler with ProfilerActivity.CPU")]
        return [Recommendation(
            id="trace.no_gpu_records", bucket="trace", title="The trace has no GPU activity records",
            message=f"The run names a GPU ({ctx.hw.gpu_name or 'from its metadata'}) but holds no kernel, copy or memset "
                    "record, so nothing can be said about GPU idle time or savings. The trace was probably captured "
                    "without CUDA activities (or in CUPTI range-profiler mode); record again with them on.",
            evidence={"median_step_ns": wall, **({"gpu_name": ctx.hw.gpu_name} if ctx.hw.gpu_name else {})},
            change="torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], ...)  # or perfscope record")]
    if "startup_api_ns" in s.columns:
        startup = ctx.median("startup_api_ns")
        if ctx.share(startup) >= ctx.th("startup_share"):
            return [Recommendation(
                id="trace.startup", bucket="trace", title="The window is start-up, not training",
                message=f"{_pct(ctx.share(startup))} of the median window ({_ms(startup)} of {_ms(wall)}) is spent in "
                        "CUDA start-up calls (context creation, cudaFree, allocation, stream creation), so it is not a "
                        "training step and its idle time says nothing about training. Profile steady-state steps: "
                        "skip the first iterations (a profiler schedule with wait/warmup) or mark steps.",
                evidence={"startup_api_ns_median": startup, "startup_share": round(ctx.share(startup), 4), "median_step_ns": wall},
                change="torch.profiler.profile(schedule=torch.profiler.schedule(wait=5, warmup=2, active=3), ...)  "
                       "# or perfscope analyze RUN --step-pattern REGEX")]
    return []


def _env_checks(env: dict[str, Any]) -> list[dict[str, Any]]:
    checks = env.get("checks") if isinstance(env, dict) else None
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []


def environment_recommendations(ctx: RuleContext) -> list[Recommendation]:
    """Turn the doctor's warn/fail checks stored in ``meta['environment']['checks']`` (dicts
    with ``id``, ``status``, ``message``, ``fix``) into recommendations, plus a direct check of
    the CPU governor when the snapshot has one and no doctor check covers it."""
    env = ctx.meta.get("environment") or {}
    out: list[Recommendation] = []
    seen: set[str] = set()
    for c in _env_checks(env):
        status = str(c.get("status", "")).lower()
        if status not in ("warn", "fail", "warning", "error"):
            continue
        cid = str(c.get("id", "check"))
        seen.add(cid)
        msg = str(c.get("message", cid))
        out.append(Recommendation(
            id=f"environment.{cid}", bucket="environment", title=msg.split(". ")[0][:120], message=msg,
            evidence={k: v for k, v in c.items() if k not in ("id", "message", "fix")}, change=str(c.get("fix", "")),
        ))
    cpu: dict[str, Any] = env["cpu"] if isinstance(env.get("cpu"), dict) else {}
    gov = env.get("cpu_governor") or cpu.get("governor")
    if not gov:
        # The doctor's facts: {"cpu": {"governors": {"powersave": 64}}}.
        govs = ((env.get("facts") or {}).get("cpu") or {}).get("governors") or {}
        others = sorted(g for g in govs if g != "performance") if isinstance(govs, dict) else []
        gov = ", ".join(others) if others else None
    if gov and str(gov) != "performance" and not any("governor" in s for s in seen):
        out.append(Recommendation(
            id="environment.cpu_governor", bucket="environment", title="CPU frequency governor is not 'performance'",
            message=f"The CPU frequency governor is {gov!r}; host-side work (launches, data loading) runs slower while the "
                    "cores clock down. Set the governor to performance.",
            evidence={"cpu_governor": str(gov)}, change="sudo cpupower frequency-set -g performance",
        ))
    return out


__all__ = ["environment_recommendations", "trace_findings"]
