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


def test_the_collector_waits_while_the_model_loads_and_runs_again_for_the_job(tmp_path, linear_model, with_script):
    """Opening the instance (the model's load, the script's import) runs with the cyclic collector
    off, so its collections do not walk TensorFlow's few hundred thousand new objects again and
    again; it is on again, the load's objects frozen, once the job runs, and after an open that
    failed."""
    broken = with_script(tmp_path, linear_model, 'raise RuntimeError("this script fails at import")\n')
    artifact = with_script(tmp_path, linear_model, """
        import gc
        import json

        AT_IMPORT = gc.isenabled()


        def input_handler(data, context):
            data.read()
            return json.dumps({"instances": [[1.0, 2.0, 3.0]]})


        def output_handler(response, context):
            return json.dumps({"at_import": AT_IMPORT, "in_hook": gc.isenabled()}), "application/json"
    """)
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.json").write_bytes(b"{}")
    code = textwrap.dedent(f"""
        import gc, json
        from tfbatch import run_transform

        def job(model, n):
            return run_transform(model=model, input={str(inp)!r}, output={str(tmp_path / "out")!r} + n,
                                 content_type="application/json", handler_workers=0, progress="off")

        report = job({str(artifact)!r}, "ok")
        assert report.ok, report.summary()
        failed = job({str(broken)!r}, "failed")
        print(json.dumps({{"failed": failed.summary(), "enabled_after": gc.isenabled()}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    assert "this script fails at import" in result["failed"] and result["enabled_after"] is True, result
    # The script's one record: the collector as its import saw it, then as its hooks did.
    assert __import__("json").loads((tmp_path / "outok" / "a.json.out").read_text()) == {
        "at_import": False, "in_hook": True}
