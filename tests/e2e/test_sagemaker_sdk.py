"""The seed-000 notebook's code, run by the real SageMaker Python SDK v2 against ``tfbatch api``.

The SDK lives in its own virtualenv (``scripts/sagemaker_venv.sh``: its boto3/numpy/pandas
pins differ from the project's), and the notebook runs there as ``sagemaker_notebook/seed000.py``
with only the documented changes. Around it, as the notebook's shell cells would: the
SavedModel (an image classifier over JPEG bytes, at version 1538687370) packed with
``tar -cvzf model.tar.gz code --directory=... 1538687370``, and the JPEGs put in the bucket the
notebook reads, ``sagemaker-sample-data-<region>/batch-transform/open-images/jpg``, on a moto
S3 server. Checked: every input has its ``.out`` with the answer the model gives the same
JPEG in this process (tfbatch.testing.LocalModel, no server involved), ``wait()`` printed the
job's log lines, and the deployed endpoint answered the same for the same image, then was
deleted with its config.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.integration.apiserver.conftest import ApiServer
from tfbatch.testing.models import make_image_bytes_model

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = Path(__file__).parent / "sagemaker_notebook"
REGION = "us-east-1"
INPUT_BUCKET = f"sagemaker-sample-data-{REGION}"
INPUT_PREFIX = "batch-transform/open-images/jpg"
BUCKET = "tfbatch-notebook"
IMAGES = ["00000b4dcff7f799.jpg", "000a1249af2bc5f0.jpg", "000ada55d36b4bcb.jpg", "0012fd4e4c3dbc5a.jpg"]


def _sdk_python() -> Path:
    subprocess.run(["bash", str(ROOT / "scripts" / "sagemaker_venv.sh")], check=True, timeout=1200)
    venv = Path(os.environ.get("TFBATCH_SAGEMAKER_VENV", ROOT / ".venv-sagemaker"))
    return venv / "bin" / "python"


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = (rng.random((24, 24)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buf, format="JPEG", quality=95)
    return buf.getvalue()


@pytest.fixture
def notebook_dir(tmp_path) -> Path:
    """What the notebook's shell cells leave in its working folder: model.tar.gz and one JPEG."""
    work = tmp_path / "notebook"
    (work / "code").mkdir(parents=True)
    (work / "code" / "inference.py").write_text((NOTEBOOK / "inference.py").read_text())
    make_image_bytes_model(work / "resnet_v2_fp32_savedmodel_NCHW_jpg" / "1538687370", size=8, channels=1)
    subprocess.run(["tar", "-czf", "model.tar.gz", "code", "--directory=resnet_v2_fp32_savedmodel_NCHW_jpg",
                    "1538687370"], cwd=work, check=True)
    (work / IMAGES[0]).write_bytes(_jpeg(0))
    return work


def test_seed_000_notebook_runs_unchanged(tmp_path, s3_server, notebook_dir):
    from tfbatch.testing import LocalModel

    sdk_python = _sdk_python()
    s3 = s3_server.client()
    s3.create_bucket(Bucket=INPUT_BUCKET)
    for i, name in enumerate(IMAGES):
        s3.put_object(Bucket=INPUT_BUCKET, Key=f"{INPUT_PREFIX}/{name}", Body=_jpeg(i))

    api = ApiServer(tmp_path / "state", s3_server.env()).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON", "VIRTUAL_ENV"))}
        env.update(
            # The three documented variables:
            AWS_ENDPOINT_URL_SAGEMAKER=api.url, AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME=api.url,
            AWS_ENDPOINT_URL_CLOUDWATCH_LOGS=api.url,
            # The test's stand-in for real S3, and credentials both servers accept:
            AWS_ENDPOINT_URL_S3=s3_server.endpoint_url, AWS_ACCESS_KEY_ID=api.access_key,
            AWS_SECRET_ACCESS_KEY=api.secret, AWS_DEFAULT_REGION=REGION,
            NOTEBOOK_BUCKET=BUCKET, SAGEMAKER_SUPPRESS_V2_WARNING="1",
        )
        run = subprocess.run([str(sdk_python), str(NOTEBOOK / "seed000.py")], cwd=notebook_dir, env=env,
                             capture_output=True, text=True, timeout=900)
        output = run.stdout + run.stderr
        assert run.returncode == 0, f"{output[-6000:]}\n--- api log ---\n{api.log.read_text()[-4000:]}"

        # Every input has its .out, equal to what the model answers for the same JPEG here.
        sm = api.client("sagemaker")
        prefix = "sagemaker/DEMO-tf-batch-inference-jpeg-images-python-sdk/output"
        with LocalModel(notebook_dir / "model.tar.gz") as local:
            for i, name in enumerate(IMAGES):
                got = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}/{name}.out")["Body"].read())
                want = local.invoke(_jpeg(i), content_type="application/x-image").json()
                assert got["predictions"][0]["classes"] == want["predictions"][0]["classes"]
                np.testing.assert_allclose(got["predictions"][0]["probabilities"],
                                           want["predictions"][0]["probabilities"], rtol=1e-5)
            first = json.loads((notebook_dir / f"{IMAGES[0]}.out").read_text())

        # wait() printed the job's own log lines, read back through CloudWatch Logs.
        job = sm.list_transform_jobs()["TransformJobSummaries"][0]
        assert job["TransformJobStatus"] == "Completed"
        logs = api.client("logs")
        group = "/aws/sagemaker/TransformJobs"
        streams = [s["logStreamName"] for s in logs.describe_log_streams(logGroupName=group)["logStreams"]
                   if s["logStreamName"].startswith(job["TransformJobName"] + "/")]
        assert streams
        lines = [e["message"] for s in streams for e in logs.get_log_events(logGroupName=group, logStreamName=s)["events"]]
        assert lines and all(line in output for line in lines)

        # deploy -> predict answered what the batch job wrote for the same image; delete removed it.
        # (deploy() prints its "---!" progress without a newline, so the marker may follow it on a line)
        realtime = json.loads(re.search(r"REALTIME (.*)$", run.stdout, re.M).group(1))
        assert realtime["predictions"][0]["classes"] == first["predictions"][0]["classes"]
        np.testing.assert_allclose(realtime["predictions"][0]["probabilities"],
                                   first["predictions"][0]["probabilities"], rtol=1e-5)
        endpoint = re.search(r"ENDPOINT (.*)$", run.stdout, re.M).group(1)
        sm.get_waiter("endpoint_deleted").wait(EndpointName=endpoint, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
        assert sm.list_endpoint_configs()["EndpointConfigs"] == []
    finally:
        api.stop()
