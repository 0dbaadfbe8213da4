"""The rule engine on hand-made contexts: triggers, savings, ordering, environment findings."""
from __future__ import annotations

import pandas as pd

from perfscope.analyzers.result import BUCKET_COLUMNS
from perfscope.analyzers.rules import DEFAULT_THRESHOLDS, RULES, RuleContext, evaluate_rules


def steps(**ns: int) -> pd.DataFrame:
    row = {c: 0 for c in BUCKET_COLUMNS}
    row.update({f"{k}_ns": v for k, v in ns.items()})
    row.update(rank=0, step=0, wall_ns=sum(row[c] for c in BUCKET_COLUMNS), hidden_network_ns=0, hidden_pcie_ns=0,
               collective_wait_ns=0, gpu_idle_ns=0, sync_calls=0, post_sync_idle_ns=0)
    return pd.DataFrame([row, {**row, "step": 1}])


def ctx(s: pd.DataFrame, **kw) -> RuleContext:
    empty = pd.DataFrame()
    base = dict(gpu_summary=empty, kernels=pd.DataFrame(columns=["rank", "name", "kind", "total_ns"]),
                launch=pd.DataFrame(columns=["rank", "launch_bound"]), collectives=empty, stragglers=empty,
                copies=pd.DataFrame(columns=["rank", "copy_kind", "pageable", "count", "bytes", "total_ns"]))
    base.update(kw)
    return RuleContext(steps=s, **base)


def test_every_rule_has_id_bucket() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for want in ("dataloader.workers", "copies.pageable", "pcie.exposed", "sync.host", "launch.bound",
                 "comm.exposed", "comm.straggler", "nccl.low_busbw", "compute.bound"):
        assert want in ids


def test_dataloader_fires_with_exact_saving() -> None:
    recs = evaluate_rules(ctx(steps(compute=6_000_000, data_loading=4_000_000)))
    assert recs[0].id == "dataloader.workers"
    assert recs[0].saving_ns == 4_000_000 and recs[0].saving_share == 0.4
    assert "num_workers" in recs[0].change and "pin_memory=True" in recs[0].change
    assert "persistent_workers=True" in recs[0].change and "prefetch_factor" in recs[0].change


def test_below_threshold_is_silent_and_thresholds_override() -> None:
    s = steps(compute=9_600_000, data_loading=400_000)  # 4 % < 5 %
    assert [r.id for r in evaluate_rules(ctx(s))] == ["compute.bound"]
    recs = evaluate_rules(ctx(s, thresholds={"data_loading_share": 0.01, "compute_share": 0.99}))
    assert [r.id for r in recs] == ["dataloader.workers"]


def test_exposed_comm_advice_names_ddp_options() -> None:
    # DDP advice needs all-reduce to be the exposed communication (issue 15): name its kernels.
    allreduce = pd.DataFrame({"rank": [0], "name": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"], "kind": ["communication"],
                              "total_ns": [5_000_000]})
    recs = evaluate_rules(ctx(steps(compute=5_000_000, network=5_000_000), kernels=allreduce))
    r = recs[0]
    assert r.id == "comm.exposed" and r.bucket == "network" and r.saving_ns == 5_000_000
    for opt in ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "register_comm_hook"):
        assert opt in r.change


def test_environment_checks_become_findings() -> None:
    meta = {"environment": {"checks": [
        {"id": "cpu.governor", "status": "warn", "message": "CPU governor is powersave", "fix": "cpupower frequency-set -g performance"},
        {"id": "gpu.persistence", "status": "fail", "message": "Persistence mode off", "fix": "nvidia-smi -pm 1"},
        {"id": "numa.gpu_affinity", "status": "pass", "message": "fine", "fix": ""},
    ]}}
    recs = evaluate_rules(ctx(steps(compute=5_000_000, host=5_000_000), meta=meta))
    env = [r for r in recs if r.bucket == "environment"]
    assert [r.id for r in env] == ["environment.cpu.governor", "environment.gpu.persistence"]
    assert env[1].change == "nvidia-smi -pm 1"
    assert recs[-1].bucket == "environment"  # after the rules with savings


def test_governor_from_snapshot_without_doctor_checks() -> None:
    recs = evaluate_rules(ctx(steps(compute=10), meta={"environment": {"facts": {"cpu": {"governors": {"powersave": 8}}}}}))
    assert any(r.id == "environment.cpu_governor" and "powersave" in r.message for r in recs)
    recs = evaluate_rules(ctx(steps(compute=10), meta={"environment": {"facts": {"cpu": {"governors": {"performance": 8}}}}}))
    assert not any(r.bucket == "environment" for r in recs)


def test_default_thresholds_documented() -> None:
    assert DEFAULT_THRESHOLDS["data_loading_share"] == 0.05 and DEFAULT_THRESHOLDS["network_share"] == 0.10
