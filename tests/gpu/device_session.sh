#!/usr/bin/env bash
# One device call that proves the recorder on a GPU: the gpu tests of perfscope.profile and
# `perfscope record`, then two NCCL scenarios recorded through `perfscope record` (CUPTI +
# NCCL profiler plugin + host hooks).  Everything lands in $OUT (runs as tarballs).
source tests/gpu/device_env.sh
log gpu-tests
timeout 150 python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_record_gpu.py 2>&1 | tail -25
(cd "$OUT" && tar czf record_gpu.tgz record_gpu && rm -rf record_gpu)
cd benchmarks/scenarios
for spec in "comm_heavy 2" "straggler 4"; do
  set -- $spec
  log "record $1 ($2 ranks)"
  SCENARIO_STEPS=6 timeout 90 perfscope record -o "$OUT/$1.perfscope" -- torchrun --standalone --nproc-per-node "$2" "$1.py" 2>&1 \
    | grep -v "^W1\|^\[W\|OMP_NUM\|\*\*\*\*" | tail -8
  perfscope info "$OUT/$1.perfscope" 2>&1 | tail -20
  (cd "$OUT" && tar czf "$1.tgz" "$1.perfscope" && rm -rf "$1.perfscope")
done
log done
