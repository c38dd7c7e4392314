"""The instance freezes the loaded model's heap for the job (``gc.freeze``: collections skip
TensorFlow's objects) and thaws it when the job closes, so a process that runs job after job
(a notebook, the SDK) does not keep an earlier job's cyclic garbage, its model included. While
the job runs the collector's thresholds are the job's (``JOB_GC_THRESHOLDS``), the process's own
again after."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_heap_frozen_during_a_job_and_thawed_after(tmp_path, linear_model):
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.json").write_bytes(b'{"instances": [[1.0, 2.0, 3.0]]}')
    code = textwrap.dedent(f"""
        import gc, json
        from tfbatch import run_transform
        from tfbatch.transform.progress import Progress

        seen = []

        class Watch(Progress):  # told of each finished object, while the instance is open
            def update(self, result):
                seen.append((gc.get_freeze_count(), gc.get_threshold()))
                super().update(result)

        gc.set_threshold(900, 11, 12)  # the process's own, to be given back
        for n in range(2):
            report = run_transform(model={str(linear_model)!r}, input={str(inp)!r},
                                   output={str(tmp_path / "out")!r} + str(n), content_type="application/json",
                                   handler_workers=0, progress=Watch("off"))
            assert report.ok, report.summary()
        print(json.dumps({{"during": seen, "after": gc.get_freeze_count(), "thresholds": gc.get_threshold()}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    from tfbatch.transform.instance import JOB_GC_THRESHOLDS

    assert result["during"] and all(count > 0 for count, _ in result["during"])
    assert all(tuple(thresholds) == JOB_GC_THRESHOLDS for _, thresholds in result["during"])
    assert result["after"] == 0 and result["thresholds"] == [900, 11, 12]
