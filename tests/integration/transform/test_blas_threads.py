"""The ``tfbatch`` command starts NumPy's OpenBLAS with one thread, in its own process and in its
handler worker processes, where the environment names no count (``runtime/blas.py``): its
threads otherwise spin ~0.1 s of CPU a process at the job's start. A count the user set is kept.

The script reports what its hooks' process sees: the variable, and OpenBLAS's own count where
``threadpoolctl`` is installed (it comes with the demo's scikit-learn)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json
    import os

    import numpy


    def _blas_threads():
        try:
            from threadpoolctl import threadpool_info
        except ImportError:
            return None
        return [pool["num_threads"] for pool in threadpool_info() if pool["internal_api"] == "openblas"]


    def input_handler(data, context):
        data.read()
        return json.dumps({"instances": [[1.0, 2.0, 3.0]]})


    def output_handler(response, context):
        seen = {"parent": os.getppid(), "env": os.environ.get("OPENBLAS_NUM_THREADS"), "threads": _blas_threads()}
        return json.dumps(seen), "application/json"
""")


@pytest.mark.parametrize("workers, preset", [("1", None), ("0", None), ("1", "2")])
def test_openblas_gets_one_thread_in_the_commands_processes_unless_the_user_set_a_count(
        tmp_path, linear_model, with_script, workers, preset):
    model = with_script(tmp_path, linear_model, SCRIPT)
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                             "OMP_NUM_THREADS")}
    if preset:
        env["OPENBLAS_NUM_THREADS"] = preset
    proc = subprocess.run([sys.executable, "-m", "tfbatch", "transform", "--model", str(model), "--input", str(inp),
                           "--output", str(tmp_path / "out"), "--content-type", "application/json",
                           "--handler-workers", workers, "--progress", "off"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads((tmp_path / "out" / "a.json.out").read_text())
    assert seen["env"] == (preset or "1")
    # The hooks ran in the command's own process (workers 0: started by this test) or in a
    # handler worker process it started (1).
    assert (seen["parent"] == os.getpid()) == (workers == "0")
    if seen["threads"] is not None:
        # OpenBLAS caps a count above the process's cores at their number.
        expected = min(int(preset), len(os.sched_getaffinity(0))) if preset else 1
        assert seen["threads"] and all(n == expected for n in seen["threads"]), seen
