#!/usr/bin/env bash
# The whole test suite. Installs what it needs first (scripts/bootstrap.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "$root/.venv/bin/python" -m pytest "$@"
