#!/usr/bin/env bash
# Creates or refreshes .venv with indexer and its dev tools, the per-event modules compiled
# with mypyc and the native per-batch path built with cargo (setup.py); a no-op when
# pyproject.toml, setup.py, those modules' sources and native/ are unchanged since the last
# run. Prints the venv's bin folder.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO_DIR/.venv}"
PYTHON="${PYTHON:-python3}"
cd "$REPO_DIR"
hot_path="$("$PYTHON" -B -c 'import setup; print(" ".join(setup.hot_path()))')"
# shellcheck disable=SC2086  # the file list is split on purpose
stamp="$VENV/.installed-$(cat pyproject.toml setup.py $hot_path native/Cargo.* native/src/*.rs \
  | sha256sum | cut -c1-16)"
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
