#!/usr/bin/env bash
# Record the mixed-cause ground-truth workloads (benchmarks/scenarios/mixed_*.py) with
# `perfscope record` (no code changes); each writes its measured injected costs beside the
# run as <name>.truth.json.  Runs are compacted and come back as $OUT/mixed_runs.tgz, for
# tests/data/h200/mixed/.  From the repository root, after `source tests/gpu/device_env.sh`:
#   bash tests/gpu/record_mixed.sh [WORKLOAD...]   (default: the PyTorch ones; e.g. jax_loader_h2d)
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
top=$(cd "$(dirname "$0")/../.." && pwd)  # the repository, or the copy carried to the device
scen=$top/benchmarks/scenarios
raw=/tmp/mixed_raw; dst=/tmp/mixed; rm -rf "$raw" "$dst"; mkdir -p "$raw" "$dst"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
for s in ${@:-loader_h2d loader_matmul matmul_host d2h_host loader_h2d_matmul host_d2h_loader}; do
  n=mixed_$s
  echo "== $(date -u +%T) record $n"
  (cd "$scen" && SCENARIO_STEPS=8 MIXED_TRUTH="$dst/$n.truth.json" timeout 150 \
    perfscope record -o "$raw/$n.perfscope" -- python3 "$n.py") 2>&1 | tail -3
  python3 "$top/scripts/compact_run.py" "$raw/$n.perfscope" "$dst/$n.perfscope" --drop-raw
  python3 -c "import json,sys; t=json.load(open(sys.argv[1])); print([(c['kind'], round(c['share']*100,1)) for c in t['components']], round(t['wall_ms'],1))" "$dst/$n.truth.json"
  perfscope analyze "$dst/$n.perfscope" 2>&1 | sed -n '/Median step/,/^└/p;/Top findings/,$p' | grep -v '^   ' | head -16
done
(cd "$dst" && tar czf "$OUT/mixed_runs.tgz" .)
du -sh "$dst"/*
echo "== $(date -u +%T) done"
