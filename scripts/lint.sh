#!/usr/bin/env bash
# Lint and type-check the installed packages: ruff, then mypy, both configured in pyproject.toml.
# collectors/, analyzers/ and dashboards/ install as perfscope.collectors, .analyzers and
# .dashboards (setup.py maps them), a layout mypy cannot follow through the editable install's
# import hook.  So mypy checks a view of the package made of symbolic links
# (.mypy_cache/view/perfscope), and its messages are turned back into repository paths.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m ruff check --no-cache
view=.mypy_cache/view
rm -rf "$view" && mkdir -p "$view/perfscope"
for entry in perfscope/*; do ln -s "$PWD/$entry" "$view/perfscope/"; done
for folder in collectors analyzers dashboards; do ln -s "$PWD/$folder" "$view/perfscope/$folder"; done
status=0
out=$(cd "$view" && python3 -m mypy --config-file "$OLDPWD/pyproject.toml" --cache-dir "$OLDPWD/.mypy_cache" \
      -p perfscope 2>&1) || status=$?
sed -E 's#^perfscope/(collectors|analyzers|dashboards)/#\1/#' <<<"$out"
exit "$status"
