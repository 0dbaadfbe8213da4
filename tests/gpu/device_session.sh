#!/usr/bin/env bash
# One device call that proves the recorder on a GPU: the gpu tests of perfscope.profile and
# `perfscope record`, then two NCCL scenarios recorded through `perfscope record` (CUPTI +
# NCCL profiler plugin + host hooks).  Everything lands in $OUT (runs as tarballs).
set -u -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log() { echo "== $(date -u +%T) $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
log install; python3 -m pip install -q -e . --no-deps --no-build-isolation 2>&1 | tail -2
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
