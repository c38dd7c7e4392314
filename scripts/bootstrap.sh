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
