#!/usr/bin/env bash
# Creates or refreshes .venv with indexer and its dev tools; a no-op when pyproject.toml is
# unchanged since the last run. Prints the venv's bin folder.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO_DIR/.venv}"
PYTHON="${PYTHON:-python3}"
stamp="$VENV/.installed-$(sha256sum "$REPO_DIR/pyproject.toml" | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q -e "$REPO_DIR[dev]" >&2
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
echo "$VENV/bin"
