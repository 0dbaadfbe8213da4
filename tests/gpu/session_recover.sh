#!/usr/bin/env bash
# One device call (issue 16, out-of-process CUPTI decoding): every GPU test, the kill -9 and
# `perfscope recover` one included, then the tiny-launch A/B of out-of-process against
# in-process decoding under `perfscope record` (benchmarks/record_decode_ab.py).
#   bash tests/gpu/session_recover.sh
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
log gpu-tests
timeout 250 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu 2>&1 | tail -40 | tee "$OUT/gpu_tests.txt"
log ab
timeout 100 python3 benchmarks/record_decode_ab.py --rounds 3 --seconds 2.5 --out "$OUT" 2>&1 | tail -8
log done
