#!/usr/bin/env bash
# The demo job: train a small CNN on scikit-learn's digits, package model.tar.gz with a
# SageMaker-style code/inference.py, run `tfbatch transform` over PNG files, print accuracy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "$root/.venv/bin/tfbatch" demo "$@"
