#!/usr/bin/env bash
# Creates .venv-sagemaker inside the checkout with the SageMaker Python SDK v2 pinned in
# requirements/sagemaker.txt, for tests/e2e/test_sagemaker_sdk.py (which calls this script).
# A separate venv because the SDK's pins (boto3, numpy, pandas, protobuf) differ from the
# project's. Idempotent: a second run with unchanged pins does nothing (stamp file).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
venv="${TFBATCH_SAGEMAKER_VENV:-$root/.venv-sagemaker}"
lock="$root/requirements/sagemaker.txt"
stamp="$venv/.tfbatch-sagemaker-installed"
want="$(sha256sum "$lock" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "[sagemaker-venv] creating $venv" >&2
  "$PY" -m venv "$venv"
fi
echo "[sagemaker-venv] installing requirements/sagemaker.txt" >&2
"$venv/bin/python" -m pip --disable-pip-version-check -q install -r "$lock"
echo "$want" > "$stamp"
echo "[sagemaker-venv] ready: $venv" >&2
