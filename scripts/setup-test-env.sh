#!/usr/bin/env bash
# Install what the tests need on a fresh machine (CPU only): torch pinned to the CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -c scripts/ci-constraints.txt -e ".[test]"
# Headless Chromium for the dashboard's browser test (tests marked `browser`); CI runs as root.
if [ ! -x /usr/bin/chromium ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
        || echo "warning: could not install chromium (not root?); the browser tests will skip" >&2
fi
