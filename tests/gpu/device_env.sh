# Sourced by the tests/gpu/*.sh device scripts, from the repository root: strict mode, $OUT,
# log(), then the carried wheels (.whl/, e.g. cupti-python) and perfscope installed with
# its native parts (the CUPTI sink, the NCCL plugin, the Kineto pre-filter) built.
set -u -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log() { echo "== $(date -u +%T) $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
log install; python3 -m pip install -q -e . --no-deps --no-build-isolation 2>&1 | tail -2
python3 collectors/cupti/build.py
