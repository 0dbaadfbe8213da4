#!/usr/bin/env bash
# Run the test suite (GPU tests skip themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pytest -q -m "not gpu" "$@"
