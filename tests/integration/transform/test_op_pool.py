"""A transform job sizes TensorFlow's intra-op pool to its share of the cores over the hops it
runs side by side (``InstanceRunner.intra_op_threads``), unless the job names a size
(``SAGEMAKER_TFS_INTRA_OP_PARALLELISM``), and leaves a process whose TensorFlow already runs as
it is, without a warning. The script reads the pool where the model runs, in the job's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json

    import tensorflow as tf


    def input_handler(data, context):
        data.read()
        return json.dumps({"instances": [[1.0, 2.0, 3.0]]})


    def output_handler(response, context):
        return json.dumps({"intra": tf.config.threading.get_intra_op_parallelism_threads()}), "application/json"
""")


@pytest.mark.parametrize("case", ["default", "named", "tensorflow ran first"])
def test_the_intra_op_pool_is_the_jobs_unless_named_or_fixed_already(tmp_path, linear_model, with_script, case):
    model = with_script(tmp_path, linear_model, SCRIPT)
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGEMAKER_TFS_")}
    if case == "named":
        env["SAGEMAKER_TFS_INTRA_OP_PARALLELISM"] = "2"
    code = textwrap.dedent(f"""
        import json, logging
        if {case == "tensorflow ran first"!r}:
            import tensorflow as tf
            tf.constant(1.0) + 1.0  # the pools are fixed from here on
        logging.basicConfig(level=logging.WARNING)
        from tfbatch import run_transform
        from tfbatch.transform import TransformSpec
        from tfbatch.transform.instance import InstanceRunner

        spec = TransformSpec.build(model={str(model)!r}, input={str(inp)!r}, output={str(tmp_path / "out")!r},
                                   content_type="application/json", handler_workers=0)
        report = run_transform(spec, progress="off")
        assert report.ok, report.summary()
        print(json.dumps({{"expected": InstanceRunner(spec, 0).intra_op_threads()}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = json.loads(proc.stdout.strip().splitlines()[-1])["expected"]
    seen = json.loads((tmp_path / "out" / "a.json.out").read_text())["intra"]
    if case == "default":
        assert seen == expected >= 1
    elif case == "named":
        assert seen == 2
    else:
        assert seen == 0  # TensorFlow's own default, kept
        assert "thread pools already initialized" not in proc.stderr
