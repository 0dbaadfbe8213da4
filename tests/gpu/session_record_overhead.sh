#!/usr/bin/env bash
# One device call: the CUPTI collector's and the recorder's GPU tests (API records from the
# sink's callback), the NCCL plugin through `perfscope record -- torchrun` on 2 and 4 ranks,
# then the paired overhead benchmark with every arm.  Logs, runs and results go to $OUT.
#   bash tests/gpu/session_record_overhead.sh [overhead.py args...]
source tests/gpu/device_env.sh
log facts
cat /sys/devices/system/clocksource/clocksource0/current_clocksource /sys/devices/system/clocksource/clocksource0/available_clocksource
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
log cupti-tests
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cupti_collector.py tests/gpu/test_record_gpu.py 2>&1 | tail -30
log nccl-record
mkdir -p /tmp/keep
PERFSCOPE_GPU_KEEP=/tmp/keep timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_nccl_plugin_gpu.py -k record 2>&1 | tail -30
for r in /tmp/keep/*.perfscope; do [ -d "$r" ] && perfscope info "$r" 2>&1 | tail -16; done
(cd /tmp/keep && tar czf "$OUT/record_runs.tgz" .)
log overhead
timeout 240 python3 benchmarks/overhead.py --paired --out "$OUT" "$@" 2>&1 | tee "$OUT/overhead.log"
log done
