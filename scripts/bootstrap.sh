#!/usr/bin/env bash
# Creates .venv inside the checkout and installs tfbatch with pinned dependencies.
# Idempotent: a second run with an unchanged lock file does nothing.
# TFBATCH_DEVICE=gpu (or an nvidia-smi on PATH) installs tensorflow[and-cuda] instead of tensorflow-cpu.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"
venv="$root/.venv"
# runtime.txt (what the wheel's extras bring) + dev.txt (tests, benchmarks); dev.txt includes runtime.txt
lock="$root/requirements/dev.txt"

device="${TFBATCH_DEVICE:-}"
if [ -z "$device" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then device=gpu; else device=cpu; fi
fi
tf_req="$root/requirements/tf-$device.txt"

# The console's browser tests drive Debian's Chromium through Playwright (whose own browser
# download is not reachable here): installed once, only when missing (TFBATCH_NO_BROWSER=1 skips).
if [ "${TFBATCH_NO_BROWSER:-}" != 1 ] && ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  as_root=()
  [ "$(id -u)" = 0 ] || as_root=(sudo -n)
  echo "[bootstrap] installing chromium (browser tests of the console)" >&2
  "${as_root[@]}" apt-get install -y -q chromium >/dev/null 2>&1 \
    || { "${as_root[@]}" apt-get update -q >/dev/null && "${as_root[@]}" apt-get install -y -q chromium >/dev/null; } \
    || echo "[bootstrap] could not install chromium; the console's browser tests will say so" >&2
fi

# The SageMaker Python SDK v2 lives in a venv of its own (its pins clash with ours); the e2e test
# of the seed notebook runs in it. Idempotent (stamp), so set-up stays out of the timed tests.
bash "$root/scripts/sagemaker_venv.sh"

stamp="$venv/.tfbatch-installed"
want="$(cat "$lock" "$root/requirements/runtime.txt" "$root/requirements/no-deps.txt" "$tf_req" pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "[bootstrap] creating $venv" >&2
  "$PY" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
echo "[bootstrap] installing pinned dependencies ($device)" >&2
"${pip[@]}" install -r "$lock" -r "$tf_req"
# tensorflow-serving-api (the tests' independent gRPC client) declares a dependency on the full
# "tensorflow" wheel; its modules only need the tensorflow(-cpu) already installed.
"${pip[@]}" install --no-deps -r "$root/requirements/no-deps.txt"
"${pip[@]}" install --no-deps --no-build-isolation -e "$root"
echo "$want" > "$stamp"
echo "[bootstrap] ready: $venv" >&2
