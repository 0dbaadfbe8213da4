#!/usr/bin/env bash
# Install what the tests need (CPU only) into the Python environment `python3` runs: the
# active venv if there is one, else that interpreter's own site-packages (CI runs as root
# without a venv). torch is pinned to the CPU build the suite was last run with.
# The one system-wide change: when Chromium is missing and this runs as root, it installs
# Chromium with apt-get for the browser tests; without root those tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "setup-test-env: installing perfscope (editable) and the test tools into $(python3 -c 'import sys; print(sys.prefix)')" >&2
python3 -m pip install -q -c scripts/ci-constraints.txt torch
python3 -m pip install -q -c scripts/ci-constraints.txt -e ".[test]"
# Headless Chromium for the dashboard's browser tests (marked `browser`).
if [ -x /usr/bin/chromium ] || command -v chromium >/dev/null; then
    :
elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "setup-test-env: installing Chromium system-wide (apt-get install chromium) for the browser tests" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
else
    echo "setup-test-env: no Chromium, and installing it needs root and apt-get; the browser tests will skip" \
         "(to run them: sudo apt-get install chromium, or PERFSCOPE_CHROMIUM=/path/to/chromium)" >&2
fi
