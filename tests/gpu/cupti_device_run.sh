#!/usr/bin/env bash
# One device call for the CUPTI collector: install, build, record samples, GPU tests,
# unit tests on the fresh samples, then the overhead benchmark.  Logs and results go to $OUT.
#   bash tests/gpu/cupti_device_run.sh [benchmark args...]
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, perfscope.collectors.cupti as c; print('torch', torch.__version__, 'available', c.available())"
log samples
rm -rf /tmp/w && python3 tests/gpu/cupti_workload.py --mode perfscope --out /tmp/w/p --samples "$OUT/samples" --steps 5 \
  && cp /tmp/w/p/summary.json "$OUT/summary_perfscope.json" && cp "$OUT"/samples/*.npz tests/data/cupti/
python3 tests/gpu/cupti_workload.py --mode torch --out /tmp/w/t --steps 5 && cp /tmp/w/t/summary.json "$OUT/summary_torch.json"
python3 -c "
import json; p=json.load(open('$OUT/summary_perfscope.json')); t=json.load(open('$OUT/summary_torch.json'))
print('kernels perfscope', p['kernels'], 'torch', t['kernels']); print('rows', p['rows']); print('stats', json.dumps(p['stats'])[:3000])"
log gpu-tests
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cupti_collector.py 2>&1 | tail -40
log unit-tests
python3 -m pytest -q -p no:cacheprovider tests/unit/test_cupti_*.py 2>&1 | tail -15
log benchmark
python3 benchmarks/overhead.py --out "$OUT" "$@" 2>&1 | tee "$OUT/benchmark.log"
log done
