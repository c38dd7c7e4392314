"""``tfbatch api --engine ray``: a job created through boto3 runs as Ray actors on a real local
cluster and writes what the local engine writes."""

from __future__ import annotations

import json

import pytest

from tfbatch import run_transform

ROLE = "arn:aws:iam::000000000000:role/tfbatch-test"


@pytest.mark.ray
def test_job_runs_on_the_ray_cluster(make_api_server, ray_cluster, tmp_path, api_linear_model):
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(6):
        (inp / f"p{i}.jsonl").write_text("".join(json.dumps([i, j, 0.5]) + "\n" for j in range(3)))
    server = make_api_server(tmp_path / "state", "--engine", "ray", "--ray-address", ray_cluster.address).start()
    sm = server.client("sagemaker")
    sm.create_model(ModelName="linear", ExecutionRoleArn=ROLE,
                    PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": api_linear_model.as_uri()})
    sm.create_transform_job(
        TransformJobName="on-ray", ModelName="linear",
        TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": inp.as_uri() + "/"}},
                        "ContentType": "application/json", "SplitType": "Line"},
        TransformOutput={"S3OutputPath": (tmp_path / "out").as_uri() + "/", "AssembleWith": "Line"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 2})
    sm.get_waiter("transform_job_completed_or_stopped").wait(
        TransformJobName="on-ray", WaiterConfig={"Delay": 1, "MaxAttempts": 600})
    described = sm.describe_transform_job(TransformJobName="on-ray")
    assert described["TransformJobStatus"] == "Completed", described.get("FailureReason")
    report = json.loads((tmp_path / "out" / "_tfbatch" / "report.json").read_text())
    assert report["instances"] == 2
    reference = run_transform(model=str(api_linear_model), input=str(inp), output=str(tmp_path / "ref"),
                              content_type="application/json", split_type="Line", assemble_with="Line")
    assert reference.ok
    outs = lambda root: {p.name: p.read_bytes() for p in sorted(root.glob("*.out"))}  # noqa: E731
    assert len(outs(tmp_path / "out")) == 6 and outs(tmp_path / "out") == outs(tmp_path / "ref")
    streams = server.client("logs").describe_log_streams(logGroupName="/aws/sagemaker/TransformJobs",
                                                         logStreamNamePrefix="on-ray/")["logStreams"]
    assert len(streams) == 2
