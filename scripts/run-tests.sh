#!/usr/bin/env bash
# Run the lint and type checks (scripts/lint.sh), then the test suite (GPU tests skip
# themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/lint.sh
python3 -m pytest -q -m "not gpu" "$@"
