#!/usr/bin/env bash
# Creates or refreshes .venv with indexer and its dev tools, the per-event modules compiled
# with mypyc (setup.py); a no-op when pyproject.toml, setup.py and those modules' sources are
# unchanged since the last run. Prints the venv's bin folder.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO_DIR/.venv}"
PYTHON="${PYTHON:-python3}"
cd "$REPO_DIR"
# indexer.build.HOT_PATH as files, read without importing the package
hot_path="$("$PYTHON" -c 'import ast, sys
tree = ast.parse(open("indexer/build.py").read())
names = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
             and getattr(n.targets[0], "id", "") == "HOT_PATH")
print(" ".join(n.replace(".", "/") + ".py" for n in names))')"
# shellcheck disable=SC2086  # the file list is split on purpose
stamp="$VENV/.installed-$(cat pyproject.toml setup.py $hot_path | sha256sum | cut -c1-16)"
stamp+="${INDEXER_PURE_PYTHON:+-pure}"
if [[ ! -f "$stamp" ]]; then
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV" >&2
  if [[ -n "${INDEXER_PURE_PYTHON:-}" ]]; then
    find indexer -name '*.so' -delete  # left by a compiled build: they would still be imported
  fi
  "$VENV/bin/pip" install -q -e "$REPO_DIR[dev]" >&2
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
echo "$VENV/bin"
