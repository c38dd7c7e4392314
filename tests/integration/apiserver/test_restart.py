"""``kill -9`` the API server mid-job, start it again: the job resumes from its ledger and
finishes with the outputs an uninterrupted run writes; models and jobs are all still there."""

from __future__ import annotations

import json

from tests.integration.apiserver.polling import poll

ROLE = "arn:aws:iam::000000000000:role/tfbatch-test"


def _job(name: str, inp, out) -> dict:
    return {
        "TransformJobName": name, "ModelName": "slow", "MaxConcurrentTransforms": 1,
        # one row per model call (0.25 s each), as SageMaker's TFS container reads it: the job
        # lasts long enough to be interrupted midway
        "Environment": {"SAGEMAKER_TFS_MAX_BATCH_SIZE": "1"},
        "TransformInput": {"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": inp.as_uri() + "/"}},
                           "ContentType": "application/json", "SplitType": "Line"},
        "TransformOutput": {"S3OutputPath": out.as_uri() + "/", "AssembleWith": "Line"},
        "TransformResources": {"InstanceType": "ml.m5.large", "InstanceCount": 1},
    }


def _wait(sm, name: str) -> dict:
    sm.get_waiter("transform_job_completed_or_stopped").wait(
        TransformJobName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 600})
    return sm.describe_transform_job(TransformJobName=name)


def test_kill_9_mid_job_then_restart_finishes_with_identical_outputs(make_api_server, tmp_path, api_slow_model):
    from tests.integration.transform.ledger_files import done_keys

    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(24):
        (inp / f"f{i:02d}.jsonl").write_text("".join(json.dumps([i, j]) + "\n" for j in range(2)))
    killed_out, reference_out = tmp_path / "killed", tmp_path / "reference"

    server = make_api_server(tmp_path / "state").start()
    sm = server.client("sagemaker")
    sm.create_model(ModelName="slow", ExecutionRoleArn=ROLE,
                    PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": api_slow_model.as_uri()})
    sm.create_transform_job(**_job("interrupted", inp, killed_out))
    poll(lambda: len(done_keys(killed_out)) >= 3, "three objects committed")
    server.kill()
    finished_before = len(done_keys(killed_out))
    assert 3 <= finished_before < 24

    again = make_api_server(tmp_path / "state").start()
    sm = again.client("sagemaker")
    assert sm.describe_model(ModelName="slow")["PrimaryContainer"]["ModelDataUrl"] == api_slow_model.as_uri()
    described = _wait(sm, "interrupted")
    assert described["TransformJobStatus"] == "Completed", described.get("FailureReason")
    resumed = again.client("logs").filter_log_events(
        logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix="interrupted/",
        filterPattern='"resumed from its ledger"')["events"]
    assert len(resumed) == 1
    # One stream per instance, the resumed run writing on in the first run's stream.
    streams = again.client("logs").describe_log_streams(logGroupName="/aws/sagemaker/TransformJobs",
                                                        logStreamNamePrefix="interrupted/")["logStreams"]
    assert len(streams) == 1

    sm.create_transform_job(**_job("reference", inp, reference_out))
    assert _wait(sm, "reference")["TransformJobStatus"] == "Completed"
    outs = lambda root: {p.name: p.read_bytes() for p in sorted(root.glob("*.out"))}  # noqa: E731
    assert len(outs(killed_out)) == 24
    assert outs(killed_out) == outs(reference_out)
    # The resumed run skipped what the killed one had committed: its report says so.
    report = json.loads((killed_out / "_tfbatch" / "report.json").read_text())
    assert report["skipped"] >= finished_before and report["objects"] == 24 - report["skipped"]
    assert [j["TransformJobName"] for j in sm.list_transform_jobs(SortBy="Name", SortOrder="Ascending")[
        "TransformJobSummaries"]] == ["interrupted", "reference"]


def test_sigterm_mid_job_hands_the_job_back_and_the_next_start_finishes_it(make_api_server, tmp_path,
                                                                            api_slow_model):
    from tests.integration.transform.ledger_files import done_keys

    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    for i in range(16):
        (inp / f"f{i:02d}.jsonl").write_text("".join(json.dumps([i, j]) + "\n" for j in range(2)))
    server = make_api_server(tmp_path / "state").start()
    sm = server.client("sagemaker")
    sm.create_model(ModelName="slow", ExecutionRoleArn=ROLE,
                    PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": api_slow_model.as_uri()})
    sm.create_transform_job(**_job("handed-back", inp, out))
    poll(lambda: len(done_keys(out)) >= 2, "two objects committed")
    server.stop()
    assert server.proc.returncode == 0
    # A shut-down is not a StopTransformJob: the job is still InProgress, with partial outputs.
    assert 2 <= len(done_keys(out)) < 16
    import sqlite3

    with sqlite3.connect(tmp_path / "state" / "state.sqlite3") as db:
        (doc,) = db.execute("SELECT doc FROM resources WHERE kind = 'transform-job'").fetchone()
    assert json.loads(doc)["TransformJobStatus"] == "InProgress"

    again = make_api_server(tmp_path / "state").start()
    sm = again.client("sagemaker")
    described = _wait(sm, "handed-back")
    assert described["TransformJobStatus"] == "Completed", described.get("FailureReason")
    assert len(list(out.glob("*.out"))) == 16
