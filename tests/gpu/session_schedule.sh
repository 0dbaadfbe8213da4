#!/usr/bin/env bash
# One device call: the schedule / on-demand GPU tests, then the recorder benchmark (a smoke
# round by default; pass recorder_overhead.py's arguments for the full run), then the CUPTI
# collector's GPU tests (the sink's pause switch must leave them green).  Results under $OUT.
#   bash tests/gpu/session_schedule.sh [recorder_overhead.py args...]
source tests/gpu/device_env.sh
log facts
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  log schedule-tests
  timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_schedule_gpu.py 2>&1 | tail -30
fi
log recorder-overhead
timeout "${BENCH_TIMEOUT:-200}" python3 benchmarks/recorder_overhead.py --out "$OUT/bench" "$@" 2>&1 | tee "$OUT/bench.log" | tail -60
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  log cupti-tests
  timeout "${CUPTI_TIMEOUT:-120}" python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cupti_collector.py 2>&1 | tail -15
fi
log done
