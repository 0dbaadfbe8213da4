#!/usr/bin/env bash
# Install perfscope into the Python environment `python3` runs (the active venv if there is
# one) and run the main job on an example: import a small two-rank PyTorch-profiler trace
# shipped with the tests, then analyse it.  No C compiler needed (perfscope builds its native
# libraries when one works; `perfscope doctor` says which are missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q -e .
out="${TMPDIR:-/tmp}/perfscope-example.perfscope"
# `python3 -m perfscope`: works even where pip put the `perfscope` script off PATH (--user installs).
python3 -m perfscope import kineto tests/data/kineto/ddp_rank0.json.gz tests/data/kineto/ddp_rank1.json.gz -o "$out" --force
python3 -m perfscope info "$out"
python3 -m perfscope analyze "$out"
