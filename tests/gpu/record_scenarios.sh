#!/usr/bin/env bash
# Record the single-GPU scenario workloads with `perfscope record` (no code changes, no
# torch.profiler): the runs come back as $OUT/scenario_runs.tgz, for tests/data/h200/.
#   bash tests/gpu/record_scenarios.sh
source tests/gpu/device_env.sh
mkdir -p /tmp/runs
cd benchmarks/scenarios
for s in slow_dataloader pageable_copies host_sync launch_bound compute_bound; do
  log "record $s"
  SCENARIO_STEPS=6 timeout 150 perfscope record -o "/tmp/runs/$s.perfscope" -- python3 "$s.py" 2>&1 | tail -4
  perfscope analyze "/tmp/runs/$s.perfscope" 2>&1 | sed -n '/Top findings/,/^2\./p' | head -3
done
(cd /tmp/runs && tar czf "$OUT/scenario_runs.tgz" .)
du -sh /tmp/runs/*
log done
