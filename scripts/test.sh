#!/usr/bin/env bash
# The test suite. Installs what it needs first (scripts/bootstrap.sh).
#   bash scripts/test.sh               every tier (what CI runs)
#   bash scripts/test.sh unit          the fast tier: no TensorFlow, no processes (< 1 minute)
#   bash scripts/test.sh integration   real TensorFlow, servers on loopback, moto S3, Ray
#   bash scripts/test.sh e2e           the CLI and the README's commands as a user runs them
# Anything else is passed to pytest (e.g. a test path or -k EXPR; -n 0 runs in one process).
# Tests run on every core (pytest-xdist, -n auto; TFBATCH_TEST_WORKERS=N sets the count).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
pytest=("$root/.venv/bin/python" -m pytest -n "${TFBATCH_TEST_WORKERS:-auto}")
case "${1:-}" in
  unit|integration|e2e) tier="$1"; shift; set -- "tests/$tier" "$@" ;;
  "")
    # Every tier: the fast tier in processes of its own, because its guard (tests/unit/conftest.py)
    # can only see a TensorFlow import in a process no other tier's test has imported it into.
    status=0
    "${pytest[@]}" tests/unit || status=$?
    "${pytest[@]}" --ignore=tests/unit --durations=25 || status=$?
    exit "$status"
    ;;
esac
exec "${pytest[@]}" "$@"
