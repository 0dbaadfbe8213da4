#!/usr/bin/env bash
# Install what the tests need on a fresh machine (CPU only): torch pinned to the CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[test]"
