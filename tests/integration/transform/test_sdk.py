"""The SageMaker-SDK-shaped facade on the transform tests' fixtures: same jobs, same outputs."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

import tfbatch
from tfbatch.errors import ConfigError
from tfbatch.storage import read_bytes
from tfbatch.testing.models import linear_expected

ROWS = [[1.0, 2.0, 3.0], [0.5, -1.0, 4.0], [2.0, 0.0, -3.0]]
JSONL = b"".join(json.dumps(r).encode() + b"\n" for r in ROWS)


def _predictions(data: bytes) -> list[list[float]]:
    return [json.loads(line)["predictions"][0] for line in data.splitlines()]


def test_transformer_runs_the_job_the_cli_would(tmp_path, linear_model):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(JSONL)
    transformer = tfbatch.Transformer(model_data=linear_model, instance_count=1, strategy="MultiRecord",
                                      assemble_with="Line", output_path=tmp_path / "out", max_payload=1,
                                      max_concurrent_transforms=4, accept="application/json",
                                      env={"TFBATCH_SDK_TEST": "1"}, instance_type="ml.m5.xlarge")
    report = transformer.transform(data=tmp_path / "in", content_type="application/json", split_type="Line",
                                   wait=True)
    assert report.ok and report.objects == 1 and report.records == 3, report.summary()
    np.testing.assert_allclose(_predictions((tmp_path / "out" / "a.jsonl.out").read_bytes()),
                               linear_expected(np.array(ROWS, np.float32)), rtol=1e-5)


def test_transform_with_wait_false_hands_back_a_job_to_wait_on(tmp_path, linear_model):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(JSONL)
    transformer = tfbatch.Transformer(linear_model, output_path=tmp_path / "out", assemble_with="Line")
    job = transformer.transform(tmp_path / "in", content_type="application/json", split_type="Line", wait=False)
    assert job is transformer.latest_transform_job
    assert job.wait().records == 3


def test_join_and_filters_take_the_sdk_names(tmp_path, linear_model):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(JSONL)
    transformer = tfbatch.Transformer(linear_model, output_path=tmp_path / "out", assemble_with="Line")
    report = transformer.transform(tmp_path / "in", content_type="application/json", split_type="Line",
                                   input_filter="$", join_source="Input", output_filter="$.SageMakerInput")
    assert report.ok, report.summary()
    # JoinSource=Input wraps an object output as {SageMakerInput, SageMakerOutput}; the filter keeps the input
    got = [json.loads(line) for line in (tmp_path / "out" / "a.jsonl.out").read_bytes().splitlines()]
    assert got == ROWS


def test_settings_tfbatch_cannot_honour_are_refused(tmp_path, linear_model):
    transformer = tfbatch.Transformer(linear_model, output_path=tmp_path / "out")
    with pytest.raises(ConfigError, match="DataCaptureConfig"):
        transformer.transform(tmp_path, batch_data_capture_config={"DestinationS3Uri": "s3://b/c"})
    with pytest.raises(TypeError, match="volume_size"):
        tfbatch.Transformer(linear_model, volume_size=30)
    with pytest.raises(ConfigError, match="output_path"):
        tfbatch.Transformer(linear_model).transform(tmp_path)


@pytest.fixture
def _fresh_job_options():
    """The job's KMS key is process-wide storage state: leave none behind for later tests."""
    from tfbatch.storage.s3options import set_job_options

    yield
    set_job_options()


def test_output_kms_key_writes_s3_outputs_with_sse_kms(s3_server, s3_bucket, linear_model, _fresh_job_options):
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="in/a.jsonl", Body=JSONL)
    key_id = f"arn:aws:kms:us-east-1:123456789012:key/{uuid.uuid4()}"
    transformer = tfbatch.Transformer(linear_model, output_path=f"s3://{s3_bucket}/out", assemble_with="Line",
                                      output_kms_key=key_id)
    report = transformer.transform(f"s3://{s3_bucket}/in", content_type="application/json", split_type="Line")
    assert report.ok, report.summary()
    written = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="out/")["Contents"]]
    assert any(k.endswith("a.jsonl.out") for k in written) and any(k.endswith("report.json") for k in written)
    for key in written:  # outputs and tfbatch's own files alike
        head = client.head_object(Bucket=s3_bucket, Key=key)
        assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"] == key_id, key
    out_key = next(k for k in written if k.endswith("a.jsonl.out"))
    assert len(_predictions(read_bytes(f"s3://{s3_bucket}/{out_key}"))) == 3


def test_model_deploy_predict_and_delete_endpoint(linear_model):
    endpoint = tfbatch.Model(model_data=linear_model).deploy(initial_instance_count=1, instance_type="local")
    try:
        assert endpoint.url.startswith("http://127.0.0.1:")
        result = endpoint.predict({"instances": ROWS})
        np.testing.assert_allclose(result["predictions"], linear_expected(np.array(ROWS, np.float32)), rtol=1e-5)
        csv = endpoint.predict("1.0,2.0,3.0", initial_args={"ContentType": "text/csv"})
        np.testing.assert_allclose(csv["predictions"], linear_expected(np.array(ROWS[:1], np.float32)), rtol=1e-5)
    finally:
        endpoint.delete_endpoint()
    assert endpoint.process.poll() is not None
