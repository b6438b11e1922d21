#!/usr/bin/env bash
# Everything CI runs: the dev stack up, the venv, ruff, mypy --strict, then all tests.
#   dev/test.sh                 # whole suite
#   dev/test.sh tests/unit -k x # pytest arguments pass through
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
started=$SECONDS
bin="$(dev/venv.sh)"
dev/stack.sh up
echo "[test] stack and venv ready in $((SECONDS - started))s"
"$bin/ruff" check indexer tests bench
"$bin/mypy"
"$bin/pytest" -p no:cacheprovider "${@:-tests}"
echo "[test] done in $((SECONDS - started))s"
