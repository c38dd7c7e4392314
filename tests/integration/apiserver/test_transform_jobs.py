"""boto3 against a real ``tfbatch api`` process: models, transform jobs, waiters, errors, paging, logs."""

from __future__ import annotations

import json
from pathlib import Path

import botocore.exceptions
import pytest
import requests

from tfbatch import run_transform
from tests.integration.apiserver.polling import poll

ROLE = "arn:aws:iam::000000000000:role/tfbatch-test"


def _container(url: str) -> dict:
    return {"Image": "tfbatch", "ModelDataUrl": url}


def _job(name: str, model: str, input_uri: str, output_uri: str, **extra) -> dict:
    request = {
        "TransformJobName": name, "ModelName": model,
        "TransformInput": {"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": input_uri}},
                           "ContentType": "application/json", "SplitType": "Line"},
        "TransformOutput": {"S3OutputPath": output_uri, "AssembleWith": "Line"},
        "TransformResources": {"InstanceType": "ml.m5.large", "InstanceCount": 1},
    }
    request.update(extra)
    return request


def _wait(sm, name: str, fails: bool = False) -> dict:
    waiter = sm.get_waiter("transform_job_completed_or_stopped")
    if fails:  # the waiter's failure state is Failed: it raises, as against AWS
        with pytest.raises(botocore.exceptions.WaiterError, match="Failed"):
            waiter.wait(TransformJobName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 600})
    else:
        waiter.wait(TransformJobName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 600})
    return sm.describe_transform_job(TransformJobName=name)


def _error(call) -> dict:
    with pytest.raises(botocore.exceptions.ClientError) as info:
        call()
    return {**info.value.response["Error"], "Status": info.value.response["ResponseMetadata"]["HTTPStatusCode"]}


def _rows(n: int) -> list[str]:
    return ["".join(json.dumps([i, j, 1.5]) + "\n" for j in range(3)) for i in range(n)]


def test_s3_job_through_boto3_matches_tfbatch_transform(api_server, s3_server, s3_bucket, api_linear_model,
                                                        tmp_path):
    from tfbatch.artifact import package

    s3 = s3_server.client()
    archive = package([str(api_linear_model)], tmp_path / "model.tar.gz")
    s3.upload_file(str(archive), s3_bucket, "models/model.tar.gz")
    local_in = tmp_path / "in"
    local_in.mkdir()
    for i, body in enumerate(_rows(5)):
        s3.put_object(Bucket=s3_bucket, Key=f"in/part-{i}.jsonl", Body=body.encode())
        (local_in / f"part-{i}.jsonl").write_text(body)

    sm = api_server.client("sagemaker")
    arn = sm.create_model(ModelName="linear", ExecutionRoleArn=ROLE,
                          PrimaryContainer=_container(f"s3://{s3_bucket}/models/model.tar.gz"))["ModelArn"]
    assert arn == "arn:aws:sagemaker:us-east-1:000000000000:model/linear"
    job_arn = sm.create_transform_job(**_job("job-one", "linear", f"s3://{s3_bucket}/in/",
                                             f"s3://{s3_bucket}/out/"))["TransformJobArn"]
    described = _wait(sm, "job-one")
    assert described["TransformJobStatus"] == "Completed", described.get("FailureReason")
    assert described["TransformJobArn"] == job_arn
    assert described["CreationTime"] <= described["TransformStartTime"] <= described["TransformEndTime"]
    assert described["TransformInput"]["SplitType"] == "Line" and described["ModelName"] == "linear"

    reference = run_transform(model=str(archive), input=str(local_in), output=str(tmp_path / "ref"),
                              content_type="application/json", split_type="Line", assemble_with="Line")
    assert reference.ok
    for i in range(5):
        got = s3.get_object(Bucket=s3_bucket, Key=f"out/part-{i}.jsonl.out")["Body"].read()
        assert got == (tmp_path / "ref" / f"part-{i}.jsonl.out").read_bytes()
        assert len(got.splitlines()) == 3

    # The job's log lines are in CloudWatch Logs, where SageMaker clients look for them.
    logs = api_server.client("logs")
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TransformJobs",
                                        logStreamNamePrefix="job-one/")["logStreams"]
    assert [s["logStreamName"].split("/")[0] for s in streams] == ["job-one"]
    events = logs.get_log_events(logGroupName="/aws/sagemaker/TransformJobs",
                                 logStreamName=streams[0]["logStreamName"], startFromHead=True)
    text = [e["message"] for e in events["events"]]
    assert any("5/5 objects succeeded" in line for line in text), text
    again = logs.get_log_events(logGroupName="/aws/sagemaker/TransformJobs",
                                logStreamName=streams[0]["logStreamName"], nextToken=events["nextForwardToken"])
    assert again["events"] == [] and again["nextForwardToken"] == events["nextForwardToken"]
    found = logs.filter_log_events(logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix="job-one/",
                                   filterPattern='"objects succeeded"')["events"]
    assert len(found) == 1 and "5/5" in found[0]["message"]

    # Same name again: AWS's ResourceInUse.
    err = _error(lambda: sm.create_transform_job(**_job("job-one", "linear", f"s3://{s3_bucket}/in/",
                                                        f"s3://{s3_bucket}/out2/")))
    assert err["Code"] == "ResourceInUse" and err["Status"] == 400


def test_missing_resources_answer_validation_exception_and_fail_the_waiter(api_server):
    sm = api_server.client("sagemaker")
    err = _error(lambda: sm.describe_transform_job(TransformJobName="no-such-job"))
    assert err["Code"] == "ValidationException" and err["Status"] == 400
    assert "Could not find job" in err["Message"]
    err = _error(lambda: sm.describe_model(ModelName="no-such-model"))
    assert err["Code"] == "ValidationException" and "Could not find model" in err["Message"]
    with pytest.raises(botocore.exceptions.WaiterError) as info:
        sm.get_waiter("transform_job_completed_or_stopped").wait(
            TransformJobName="no-such-job", WaiterConfig={"Delay": 1, "MaxAttempts": 3})
    assert "ValidationException" in str(info.value)


def test_bad_requests_name_the_field(api_server, tmp_path, api_linear_model):
    sm = api_server.client("sagemaker")
    err = _error(lambda: sm.create_model(ModelName="bad_name!", ExecutionRoleArn=ROLE,
                                         PrimaryContainer=_container(api_linear_model.as_uri())))
    assert err["Code"] == "ValidationException" and "'modelName'" in err["Message"]
    err = _error(lambda: sm.create_model(ModelName="no-data", ExecutionRoleArn=ROLE,
                                         PrimaryContainer={"Image": "tfbatch"}))
    assert err["Code"] == "ValidationException" and "PrimaryContainer.ModelDataUrl" in err["Message"]
    sm.create_model(ModelName="linear", ExecutionRoleArn=ROLE, PrimaryContainer=_container(api_linear_model.as_uri()))
    inp, out = (tmp_path / "in").as_uri() + "/", (tmp_path / "out").as_uri() + "/"
    bad = _job("bad-split", "linear", inp, out)
    bad["TransformInput"]["SplitType"] = "Paragraph"
    # botocore checks enums only in its own client-side validation, which we turn off to reach the server.
    raw = api_server.client("sagemaker", config=botocore.config.Config(parameter_validation=False,
                                                                       retries={"max_attempts": 1}))
    err = _error(lambda: raw.create_transform_job(**bad))
    assert err["Code"] == "ValidationException" and "'transformInput.splitType'" in err["Message"]
    assert "enum value set" in err["Message"]
    err = _error(lambda: raw.create_transform_job(**_job("big-payload", "linear", inp, out, MaxPayloadInMB=101)))
    # botocore's model sets no maximum here; TransformSpec holds SageMaker's documented 100.
    assert "MaxPayloadInMB" in err["Message"] and "less than or equal to 100" in err["Message"]
    err = _error(lambda: sm.create_transform_job(**_job("no-model", "missing-model", inp, out)))
    assert err["Code"] == "ValidationException" and "Could not find model" in err["Message"]
    err = _error(lambda: sm.create_transform_job(**_job("inside", "linear", inp, inp)))
    assert err["Code"] == "ValidationException" and "output prefix" in err["Message"]
    err = _error(lambda: sm.create_transform_job(**_job("capture", "linear", inp, out, DataCaptureConfig={
        "DestinationS3Uri": "s3://b/capture"})))
    assert "DataCaptureConfig is not supported" in err["Message"]
    assert sm.list_transform_jobs()["TransformJobSummaries"] == []


def test_unsigned_and_wrongly_signed_requests_get_403(api_server):
    wrong = api_server.client("sagemaker", aws_secret_access_key="wrong-secret")
    err = _error(lambda: wrong.list_models())
    assert err["Code"] == "InvalidSignatureException" and err["Status"] == 403
    stranger = api_server.client("sagemaker", aws_access_key_id="AKIDSTRANGER")
    err = _error(lambda: stranger.list_models())
    assert err["Code"] == "UnrecognizedClientException" and err["Status"] == 403
    answer = requests.post(api_server.url + "/", data=b"{}", timeout=30,
                           headers={"X-Amz-Target": "SageMaker.ListModels",
                                    "Content-Type": "application/x-amz-json-1.1"})
    assert answer.status_code == 403 and answer.json()["__type"] == "MissingAuthenticationTokenException"
    assert api_server.secret not in api_server.log.read_text()


def test_paging_with_next_token(api_server, api_linear_model):
    sm = api_server.client("sagemaker")
    names = [f"model-{i}" for i in range(7)]
    for name in names:
        sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer=_container(api_linear_model.as_uri()))
    seen, token, pages = [], None, 0
    while True:
        kwargs = {"MaxResults": 3, "SortBy": "Name", "SortOrder": "Ascending"}
        if token:
            kwargs["NextToken"] = token
        answer = sm.list_models(**kwargs)
        seen += [m["ModelName"] for m in answer["Models"]]
        pages += 1
        token = answer.get("NextToken")
        if not token:
            break
    assert seen == names and pages == 3
    # A model deleted between pages does not shift the next page.
    first = sm.list_models(MaxResults=2, SortBy="Name", SortOrder="Ascending")
    sm.delete_model(ModelName="model-0")
    rest = sm.list_models(MaxResults=10, SortBy="Name", SortOrder="Ascending", NextToken=first["NextToken"])
    assert [m["ModelName"] for m in rest["Models"]] == names[2:]
    paged = [m["ModelName"] for p in sm.get_paginator("list_models").paginate(PaginationConfig={"PageSize": 2})
             for m in p["Models"]]
    assert sorted(paged) == names[1:] and len(paged) == 6
    assert [m["ModelName"] for m in sm.list_models(NameContains="model-6")["Models"]] == ["model-6"]
    err = _error(lambda: sm.list_models(NextToken="garbage"))
    assert err["Code"] == "ValidationException"


def test_tags_on_models(api_server, api_linear_model):
    sm = api_server.client("sagemaker")
    arn = sm.create_model(ModelName="tagged", ExecutionRoleArn=ROLE, PrimaryContainer=_container(
        api_linear_model.as_uri()), Tags=[{"Key": "team", "Value": "vision"}])["ModelArn"]
    sm.add_tags(ResourceArn=arn, Tags=[{"Key": "stage", "Value": "test"}])
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "stage", "Value": "test"},
                                                     {"Key": "team", "Value": "vision"}]
    sm.delete_tags(ResourceArn=arn, TagKeys=["team"])
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "stage", "Value": "test"}]
    err = _error(lambda: sm.list_tags(ResourceArn=arn.replace("tagged", "missing")))
    assert err["Code"] == "ValidationException"


def _slow_inputs(folder: Path, n: int) -> None:
    folder.mkdir()
    for i in range(n):
        (folder / f"f{i:02d}.jsonl").write_text("".join(json.dumps([i, j]) + "\n" for j in range(2)))


def _done_outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.out"))}



def _slow_job(name: str, inp: Path, out: Path) -> dict:
    # One row per model batch at 0.25 s each, one request at a time: ~0.5 s per object.
    return _job(name, "slow", inp.as_uri() + "/", out.as_uri() + "/", MaxConcurrentTransforms=1,
                Environment={"SAGEMAKER_TFS_MAX_BATCH_SIZE": "1"})


def test_stop_keeps_partial_outputs_and_a_consistent_ledger(api_server, tmp_path, api_slow_model):
    from tests.integration.transform.ledger_files import done_keys

    inp, out = tmp_path / "in", tmp_path / "out"
    _slow_inputs(inp, 40)
    sm = api_server.client("sagemaker")
    sm.create_model(ModelName="slow", ExecutionRoleArn=ROLE, PrimaryContainer=_container(api_slow_model.as_uri()))
    sm.create_transform_job(**_slow_job("to-stop", inp, out))
    poll(lambda: len(done_keys(out)) >= 2, "two objects committed")
    sm.stop_transform_job(TransformJobName="to-stop")
    assert sm.describe_transform_job(TransformJobName="to-stop")["TransformJobStatus"] in ("Stopping", "Stopped")
    described = _wait(sm, "to-stop")
    assert described["TransformJobStatus"] == "Stopped"
    done = set(done_keys(out))
    outputs = _done_outputs(out)
    assert 2 <= len(done) < 40
    # Every object the ledger calls done has its complete output; nothing else is half-written.
    assert {f"{k}.out" for k in done} <= set(outputs)
    for body in outputs.values():
        assert len(body.splitlines()) == 2
    err = _error(lambda: sm.stop_transform_job(TransformJobName="to-stop"))
    assert err["Code"] == "ValidationException"


def test_queue_runs_at_most_max_concurrent_jobs_and_loses_none(make_api_server, tmp_path, api_linear_model):
    server = make_api_server(tmp_path / "state", "--max-concurrent-jobs", "2").start()
    sm = server.client("sagemaker")
    sm.create_model(ModelName="linear", ExecutionRoleArn=ROLE, PrimaryContainer=_container(api_linear_model.as_uri()))
    inp = tmp_path / "in"
    inp.mkdir()
    for i, body in enumerate(_rows(3)):
        (inp / f"part-{i}.jsonl").write_text(body)
    names = [f"queued-{i}" for i in range(6)]
    for name in names:
        sm.create_transform_job(**_job(name, "linear", inp.as_uri() + "/", (tmp_path / name).as_uri() + "/"))
    jobs = [_wait(sm, name) for name in names]
    assert [j["TransformJobStatus"] for j in jobs] == ["Completed"] * 6
    reference = {p.name: p.read_bytes() for p in sorted((tmp_path / names[0]).glob("*.out"))}
    assert len(reference) == 3
    for name in names[1:]:
        assert {p.name: p.read_bytes() for p in sorted((tmp_path / name).glob("*.out"))} == reference
    # Each job's [start, end] lies inside one worker's turn, so no instant sees more than two.
    spans = [(j["TransformStartTime"], j["TransformEndTime"]) for j in jobs]
    for start, _end in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= 2
    statuses = sm.list_transform_jobs(StatusEquals="Completed", MaxResults=100)["TransformJobSummaries"]
    assert sorted(s["TransformJobName"] for s in statuses) == names


def test_jobs_past_the_in_progress_cap_get_resource_limit_exceeded(make_api_server, tmp_path, api_slow_model):
    server = make_api_server(tmp_path / "state", "--max-jobs-in-progress", "1").start()
    sm = server.client("sagemaker")
    sm.create_model(ModelName="slow", ExecutionRoleArn=ROLE, PrimaryContainer=_container(api_slow_model.as_uri()))
    inp = tmp_path / "in"
    _slow_inputs(inp, 20)
    sm.create_transform_job(**_slow_job("first", inp, tmp_path / "out1"))
    err = _error(lambda: sm.create_transform_job(**_slow_job("second", inp, tmp_path / "out2")))
    assert err["Code"] == "ResourceLimitExceeded" and "--max-jobs-in-progress 1" in err["Message"]
    sm.stop_transform_job(TransformJobName="first")
    assert _wait(sm, "first")["TransformJobStatus"] == "Stopped"
    sm.create_transform_job(**_slow_job("second", inp, tmp_path / "out2"))
    sm.stop_transform_job(TransformJobName="second")
    assert _wait(sm, "second")["TransformJobStatus"] == "Stopped"
    err = _error(lambda: sm.describe_transform_job(TransformJobName="third"))
    assert err["Code"] == "ValidationException"


def test_a_job_stopped_while_queued_ends_stopped_without_running(make_api_server, tmp_path, api_slow_model):
    server = make_api_server(tmp_path / "state", "--max-concurrent-jobs", "1").start()
    sm = server.client("sagemaker")
    sm.create_model(ModelName="slow", ExecutionRoleArn=ROLE, PrimaryContainer=_container(api_slow_model.as_uri()))
    inp = tmp_path / "in"
    _slow_inputs(inp, 20)
    sm.create_transform_job(**_slow_job("running", inp, tmp_path / "out1"))
    sm.create_transform_job(**_slow_job("queued", inp, tmp_path / "out2"))
    sm.stop_transform_job(TransformJobName="queued")
    sm.stop_transform_job(TransformJobName="running")
    assert _wait(sm, "running")["TransformJobStatus"] == "Stopped"
    queued = _wait(sm, "queued")
    assert queued["TransformJobStatus"] == "Stopped" and "TransformStartTime" not in queued
    assert not (tmp_path / "out2").exists()


def test_failed_records_fail_the_job_as_on_aws_but_keep_the_good_outputs(api_server, tmp_path,
                                                                          api_failing_model):
    sm = api_server.client("sagemaker")
    sm.create_model(ModelName="picky", ExecutionRoleArn=ROLE, PrimaryContainer=_container(api_failing_model.as_uri()))
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    for i in range(4):
        sign = -1 if i == 2 else 1
        (inp / f"p{i}.jsonl").write_text(json.dumps([sign * 1.0, 2.0]) + "\n")
    sm.create_transform_job(**_job("picky-job", "picky", inp.as_uri() + "/", out.as_uri() + "/"))
    described = _wait(sm, "picky-job", fails=True)
    assert described["TransformJobStatus"] == "Failed"
    assert described["FailureReason"].startswith("ClientError: 1 of 4 objects had records that failed")
    assert "negative input" in described["FailureReason"] and "errors.jsonl" in described["FailureReason"]
    answered = sorted(p.name for p in out.glob("*.out") if "predictions" in p.read_text())
    assert answered == ["p0.jsonl.out", "p1.jsonl.out", "p3.jsonl.out"]
    lines = [e["message"] for e in api_server.client("logs").filter_log_events(
        logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix="picky-job/")["events"]]
    assert any(line.startswith("p2.jsonl: 1 of 1 records failed") for line in lines), lines

    # An artifact that is not there fails the job with a ClientError naming it.
    sm.create_model(ModelName="gone", ExecutionRoleArn=ROLE,
                    PrimaryContainer=_container((tmp_path / "no-such-model").as_uri()))
    sm.create_transform_job(**_job("gone-job", "gone", inp.as_uri() + "/", (tmp_path / "out2").as_uri() + "/"))
    described = _wait(sm, "gone-job", fails=True)
    assert described["TransformJobStatus"] == "Failed"
    assert described["FailureReason"].startswith("ClientError") and "no-such-model" in described["FailureReason"]


ENV_SCRIPT = '''
import json
import os


def input_handler(data, context):
    return json.dumps({"instances": [json.loads(data.read())]})


def output_handler(response, context):
    seen = {k: os.environ.get(k) for k in ("TFBATCH_TEST_MARKER", "SAGEMAKER_BATCH")}
    return json.dumps(seen), "application/json"
'''


def test_each_job_sees_only_its_own_environment(make_api_server, tmp_path, api_linear_model):
    from tfbatch.artifact import package

    code = tmp_path / "code"
    code.mkdir()
    (code / "inference.py").write_text(ENV_SCRIPT)
    archive = package([str(api_linear_model)], tmp_path / "model.tar.gz", code_dir=code)
    server = make_api_server(tmp_path / "state", "--max-concurrent-jobs", "2").start()
    sm = server.client("sagemaker")
    sm.create_model(ModelName="env", ExecutionRoleArn=ROLE, PrimaryContainer=_container(archive.as_uri()))
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "row.json").write_text(json.dumps([1.0, 2.0, 3.0]))

    def job(name: str, **extra) -> dict:
        request = _job(name, "env", inp.as_uri() + "/", (tmp_path / name).as_uri() + "/", **extra)
        request["TransformInput"]["SplitType"] = "None"
        return request

    sm.create_transform_job(**job("job-a", Environment={"TFBATCH_TEST_MARKER": "a"}))
    sm.create_transform_job(**job("job-b", Environment={"TFBATCH_TEST_MARKER": "b"}))
    seen = {}
    for name in ("job-a", "job-b"):
        assert _wait(sm, name)["TransformJobStatus"] == "Completed"
        seen[name] = json.loads((tmp_path / name / "row.json.out").read_text())
    assert seen == {"job-a": {"TFBATCH_TEST_MARKER": "a", "SAGEMAKER_BATCH": "true"},
                    "job-b": {"TFBATCH_TEST_MARKER": "b", "SAGEMAKER_BATCH": "true"}}
    # Nothing of theirs stayed in the server's environment, which later jobs' workers inherit.
    sm.create_transform_job(**job("job-c"))
    assert _wait(sm, "job-c")["TransformJobStatus"] == "Completed"
    assert json.loads((tmp_path / "job-c" / "row.json.out").read_text()) == {
        "TFBATCH_TEST_MARKER": None, "SAGEMAKER_BATCH": "true"}
