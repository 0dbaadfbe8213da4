#!/usr/bin/env bash
# Record the single-GPU scenario workloads with `perfscope record` (no code changes, no
# torch.profiler): the runs come back as $OUT/scenario_runs.tgz, for tests/data/h200/.
#   bash tests/gpu/record_scenarios.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/runs
log() { echo "== $(date -u +%T) $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
log install; python3 -m pip install -q -e . --no-deps --no-build-isolation 2>&1 | tail -2
python3 collectors/cupti/build.py
cd benchmarks/scenarios
for s in slow_dataloader pageable_copies host_sync launch_bound compute_bound; do
  log "record $s"
  SCENARIO_STEPS=6 timeout 150 perfscope record -o "/tmp/runs/$s.perfscope" -- python3 "$s.py" 2>&1 | tail -4
  perfscope analyze "/tmp/runs/$s.perfscope" 2>&1 | sed -n '/Top findings/,/^2\./p' | head -3
done
(cd /tmp/runs && tar czf "$OUT/scenario_runs.tgz" .)
du -sh /tmp/runs/*
log done
