"""The console's view of ``tfbatch api``'s state: a real SQLite State (no server, no processes)."""

from __future__ import annotations

import json

from tfbatch.apiserver.console_source import ApiConsoleSource, console_token
from tfbatch.apiserver.progress import GROUP
from tfbatch.apiserver.runner import KIND
from tfbatch.apiserver.state import State
from tfbatch.console.source import ALL_INSTANCES, ConsoleSource, Point


def _job(state: State, name: str, created: float, status: str = "Completed", instances: int = 2,
         output: str = "s3://b/out") -> None:
    doc = {"TransformJobName": name, "TransformJobStatus": status, "CreationTime": created,
           "TransformStartTime": created + 1, "ModelName": "m",
           "TransformInput": {"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/in/"}},
                              "ContentType": "application/json", "SplitType": "Line"},
           "TransformOutput": {"S3OutputPath": output}, "TransformResources": {"InstanceCount": instances}}
    if status in ("Completed", "Failed", "Stopped"):
        doc["TransformEndTime"] = created + 11
    state.insert(KIND, name, f"arn:job/{name}", doc, created=created)


def test_jobs_pages_newest_first_with_progress_counts(tmp_path):
    state = State(tmp_path / "state")
    with state.transaction():  # one commit (and one fsync) for the lot
        for i in range(3000):
            _job(state, f"job-{i:04d}", 1_700_000_000 + i, "InProgress" if i % 3 == 2 else "Completed")
    state.put_progress("job-2999", {"objects": 40, "records": 400, "failed": 1, "failed_records": 2,
                                    "total": 100, "instances": [
                                        {"instance": 0, "objects": 25, "records": 250, "failed": 1, "failed_records": 2},
                                        {"instance": 1, "objects": 15, "records": 150, "failed": 0, "failed_records": 0}],
                                    "series": [[1.0, 10, 100, 0], [5.0, 40, 400, 2]]})
    source = ApiConsoleSource(state, {})
    assert isinstance(source, ConsoleSource)
    page = source.list_jobs(offset=0, limit=50)
    assert page.total == 3000 and [r.name for r in page.rows[:2]] == ["job-2999", "job-2998"]
    top = page.rows[0]
    assert (top.status, top.objects_done, top.objects_total, top.records, top.failed_records, top.failed_objects) == (
        "InProgress", 40, 100, 400, 2, 1)
    assert source.list_jobs(status="InProgress", offset=990, limit=50).rows[-1].name == "job-0002"
    assert source.list_jobs(status="InProgress").total == 1000
    assert source.progress("job-2999") == {ALL_INSTANCES: [Point(0.0, 0, 0, 0), Point(1.0, 10, 100, 0),
                                                           Point(5.0, 40, 400, 2)]}
    counts = source.job("job-2999").instances
    assert [(c.instance, c.objects, c.records, c.failed_objects, c.failed_records) for c in counts] == [
        (0, 25, 250, 1, 2), (1, 15, 150, 0, 0)]
    assert source.job("nope") is None and source.progress("nope") == {0: []}


def test_a_finished_jobs_page_reads_its_report_errors_and_log(tmp_path):
    state = State(tmp_path / "state")
    out = tmp_path / "out"
    (out / "_tfbatch").mkdir(parents=True)
    errors = out / "_tfbatch" / "errors.jsonl"
    errors.write_text(json.dumps({"object": "a<b>.json", "record": 3, "offset": 99, "error": "bad <i>x</i>"}) + "\n")
    (out / "_tfbatch" / "report.json").write_text(json.dumps({
        "error_report": str(errors), "instances": 1,
        "batches": {"0:m/1/serving_default": {"lane": "batch", "max_batch_size": 32, "workers": 2,
                                              "chosen_by": {"max_batch_size": "--max-batch-size", "workers": "default"}}}}))
    _job(state, "done", 1_700_000_000.0, "Failed", instances=1, output=str(out))
    state.update(KIND, "done", FailureReason="ClientError: 1 of 2 objects had records that failed")
    state.put_log_events(GROUP, "done/tfbatch-0-1", [(1_700_000_000_000 + i, f"line {i}") for i in range(150)])
    source = ApiConsoleSource(state, {})
    detail = source.job("done")
    assert detail.row.status == "Failed" and detail.message.startswith("ClientError")
    assert detail.error_report == str(errors) and ("Split type", "Line") in detail.details
    assert [(s.name, s.value, s.chosen_by) for s in detail.settings][:3] == [
        ("m/1/serving_default lane", "batch", "tfbatch (what the job's shape allows)"),
        ("m/1/serving_default batch size", "32", "--max-batch-size"),
        ("m/1/serving_default workers", "2", "default")]
    (failure,) = source.failures("done")
    assert (failure.object, failure.record, failure.offset, failure.error) == ("a<b>.json", 3, 99, "bad <i>x</i>")
    tail = source.log_tail("done", limit=100)
    assert len(tail) == 100 and tail[0].endswith("line 50") and tail[-1].endswith("line 149")


def test_the_console_token_is_made_once_and_kept_private(tmp_path, monkeypatch):
    monkeypatch.delenv("TFBATCH_CONSOLE_TOKEN", raising=False)

    class Config:
        state_dir = tmp_path / "state"

    first = console_token(Config)
    assert len(first) >= 32 and console_token(Config) == first
    assert (tmp_path / "state" / "console-token").stat().st_mode & 0o077 == 0
    monkeypatch.setenv("TFBATCH_CONSOLE_TOKEN", "from-the-environment-123")
    assert console_token(Config) == "from-the-environment-123"
