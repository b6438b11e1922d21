#!/usr/bin/env bash
# Everything CI runs: the dev stack up, the venv, ruff, mypy --strict, the whole suite on the
# default stack (Elasticsearch 9), then the tests marked `servers` on Elasticsearch 8 and
# OpenSearch 2 and 3 (each started beside the default stack, then stopped), and those plus the
# `secure` ones on the secured stack (SECURE=1: TLS and authentication on every server).
#   dev/test.sh                 # all of it
#   dev/test.sh tests/unit -k x # pytest arguments pass through: that run only, default stack
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
started=$SECONDS
bin="$(dev/venv.sh)"
dev/stack.sh up
echo "[test] stack and venv ready in $((SECONDS - started))s"
"$bin/ruff" check indexer tests bench setup.py
"$bin/mypy"
pytest=("$bin/pytest" -p no:cacheprovider)
build="$("$bin/indexer" --version)"
echo "[test] $build"
if [[ -z "${INDEXER_PURE_PYTHON:-}" && "$build" != *"(compiled with mypyc + native per-batch path)" ]]
then
  echo "[test] the per-event modules did not compile or the native path was not built (pip's" \
    "output says why); run with INDEXER_PURE_PYTHON=1 to test pure Python" >&2
  exit 1
fi
if (($#)); then
  "${pytest[@]}" "$@"
  echo "[test] done in $((SECONDS - started))s"
  exit 0
fi
"${pytest[@]}" tests
echo "[test] default stack done at $((SECONDS - started))s"
# The unit suite once more on the same sources without their compiled modules.
pure="$(mktemp -d "${TMPDIR:-/tmp}/indexer-pure.XXXXXX")"
tar -c --exclude=./.git --exclude=./.venv --exclude=./.stack --exclude='*.so' . | tar -x -C "$pure"
(cd "$pure" && "${pytest[@]}" -q tests/unit)
rm -rf "$pure"
echo "[test] unit suite on pure Python done at $((SECONDS - started))s"

on_variant() { # on_variant <env...> -- <pytest args...>: one more stack, its tests, stopped
  local env=() profile
  while [[ "$1" != -- ]]; do env+=("$1"); shift; done
  shift
  profile="$(mktemp "${TMPDIR:-/tmp}/indexer-profile.XXXXXX.toml")"
  env "${env[@]}" dev/stack.sh up "${stack_servers[@]}"
  env "${env[@]}" dev/stack.sh profile >"$profile"
  local status=0
  env "${env[@]}" INDEXER_TEST_CONFIG="$profile" "${pytest[@]}" "$@" || status=$?
  env "${env[@]}" dev/stack.sh down "${stack_servers[@]}"
  rm -f "$profile"
  echo "[test] ${env[*]} done at $((SECONDS - started))s"
  return "$status"
}

stack_servers=(elasticsearch)
for search in es8 opensearch2 opensearch3; do
  on_variant SEARCH="$search" -- -m servers tests/integration
done
stack_servers=()
on_variant SECURE=1 -- -m "servers or secure" tests/integration
echo "[test] done in $((SECONDS - started))s"
