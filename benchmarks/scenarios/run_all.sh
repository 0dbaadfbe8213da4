#!/usr/bin/env bash
# Record every scenario with torch.profiler on a GPU machine; traces land in $1 (default $OUT).
# Usage: bash benchmarks/scenarios/run_all.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")"
out="${1:-${OUT:-/tmp/scenarios}}"
mkdir -p "$out"
export SCENARIO_PROFILER=torch SCENARIO_OUT="$out" NCCL_NVLS_ENABLE=0
for s in slow_dataloader pageable_copies host_sync launch_bound compute_bound; do
  echo "== $s"; timeout 120 python3 "$s.py" || echo "FAILED $s"
done
echo "== comm_heavy"; timeout 150 torchrun --standalone --nproc-per-node 2 comm_heavy.py || echo "FAILED comm_heavy"
echo "== straggler"; timeout 150 torchrun --standalone --nproc-per-node 4 straggler.py || echo "FAILED straggler"
for f in "$out"/*.json; do gzip -9f "$f"; done
ls -la "$out"
