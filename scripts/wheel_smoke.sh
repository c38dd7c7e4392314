#!/usr/bin/env bash
# The wheel job (.ci/run): build the sdist and wheel, check them, install the wheel with [cpu]
# into a fresh venv the way a user would, and run the CLI against it (scripts/ci/wheel_smoke.py).
# Pins come from requirements/ as constraints, so the install reuses pip's cache and resolves
# the same versions the test suite ran with. About a minute with a warm pip cache.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/tfbatch-wheel.XXXXXX")"
trap 'rm -rf "$work"' EXIT
pip_q=(--disable-pip-version-check -q)

echo "[wheel] building in $work" >&2
"$PY" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install "${pip_q[@]}" -r "$root/requirements/ci-tools.txt"
echo "[wheel] tools at ${SECONDS}s" >&2
"$work/tools/bin/python" -m build --outdir "$work/dist" "$root" >"$work/build.log" 2>&1 \
    || { cat "$work/build.log" >&2; exit 1; }
"$work/tools/bin/python" -m twine check --strict "$work"/dist/*
wheel="$(ls "$work"/dist/*.whl)"
"$work/tools/bin/python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
stray = [n for n in names if n.split("/")[0] in ("tests", "benchmarks", "scripts", "docs")]
assert not stray, f"the wheel carries non-package files: {stray[:5]}"
assert "tfbatch/py.typed" in names and any("tfs/protos/tensorflow_serving/apis/predict_pb2.py" in n for n in names)
print(f"[wheel] {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, no tests/benchmarks", file=sys.stderr)
PY

echo "[wheel] built and checked at ${SECONDS}s; installing ${wheel##*/}[cpu] into a fresh venv" >&2
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install "${pip_q[@]}" "$wheel[cpu]" \
    -c "$root/requirements/runtime.txt" -c "$root/requirements/tf-cpu.txt"
echo "[wheel] installed at ${SECONDS}s" >&2
# run from $work so the checkout's src/ cannot shadow the installed package
(cd "$work" && "$work/venv/bin/python" "$root/scripts/ci/wheel_smoke.py" "$work")
echo "[wheel] done in ${SECONDS}s" >&2
