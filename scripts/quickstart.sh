#!/usr/bin/env bash
# Install perfscope and run the main job on an example: import a small two-rank
# PyTorch-profiler trace shipped with the tests, then analyse it.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e .
out="${TMPDIR:-/tmp}/perfscope-example.perfscope"
perfscope import kineto tests/data/kineto/ddp_rank0.json.gz tests/data/kineto/ddp_rank1.json.gz -o "$out" --force
perfscope info "$out"
perfscope analyze "$out"
