"""Endpoints through boto3 against a real ``tfbatch api`` process: configs, endpoints, waiters,
InvokeEndpoint (answers, ModelError, logs), UpdateEndpoint under load, kill -9 and restart.

Every endpoint is a real ``tfbatch serve`` process loading a real SavedModel (the linear test
model, one seed per model so answers tell the models apart)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, WaiterError

from tests.integration.apiserver.conftest import ApiServer
from tfbatch.testing import models

# The server accepts the credentials it runs with; models here are file:// folders, so no S3.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "AKIDTFBATCHTEST", "AWS_SECRET_ACCESS_KEY": "tfbatch-test-secret"}
SLOW_READS = Config(retries={"max_attempts": 1}, read_timeout=120)
FAST = {"Delay": 1, "MaxAttempts": 300}  # waiters poll every second; 300 s is only a failure guard
ROWS = [[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]]
FAILING_SCRIPT = '''
def input_handler(data, context):
    raise ValueError("input_handler refuses " + data.read().decode())


def output_handler(response, context):
    return response.content, "application/json"
'''


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    out = {}
    for seed in (0, 1, 2, 3):
        out[f"seed{seed}"] = models.make_linear_model(root / f"seed{seed}" / "1", seed=seed).parent
    failing = root / "failing"
    models.make_linear_model(failing / "1")
    (failing / "code").mkdir()
    (failing / "code" / "inference.py").write_text(FAILING_SCRIPT)
    out["failing"] = failing
    return out


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    server = ApiServer(root / "state", CREDENTIALS).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sm(api):
    return api.client("sagemaker")


@pytest.fixture(scope="module")
def runtime(api):
    return api.client("sagemaker-runtime", config=SLOW_READS)


def _model(sm, name: str, path: Path) -> None:
    sm.create_model(ModelName=name, ExecutionRoleArn="arn:aws:iam::000000000000:role/test",
                    PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": f"file://{path}"})


def _config(sm, name: str, model: str, instances: int = 1) -> None:
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": model, "InitialInstanceCount": instances,
         "InstanceType": "ml.m5.large"}])


def _predict(runtime, endpoint: str, rows=ROWS) -> np.ndarray:
    answer = runtime.invoke_endpoint(EndpointName=endpoint, ContentType="application/json",
                                     Body=json.dumps({"instances": rows}))
    assert answer["InvokedProductionVariant"] == "AllTraffic"
    return np.asarray(json.loads(answer["Body"].read())["predictions"], dtype=np.float32)


def _expected(seed: int, rows=ROWS) -> np.ndarray:
    return models.linear_expected(np.asarray(rows, dtype=np.float32), seed=seed)


def _error(call) -> dict:
    with pytest.raises(ClientError) as info:
        call()
    return info.value.response


def test_lifecycle_with_waiters(sm, runtime, artifacts):
    _model(sm, "life-m", artifacts["seed0"])
    _config(sm, "life-c", "life-m")
    config = sm.describe_endpoint_config(EndpointConfigName="life-c")
    assert config["ProductionVariants"][0]["ModelName"] == "life-m"
    assert config["EndpointConfigArn"].endswith(":endpoint-config/life-c")

    arn = sm.create_endpoint(EndpointName="life", EndpointConfigName="life-c")["EndpointArn"]
    assert sm.describe_endpoint(EndpointName="life")["EndpointStatus"] in ("Creating", "InService")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="life", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="life")
    assert described["EndpointArn"] == arn and described["EndpointConfigName"] == "life-c"
    assert described["ProductionVariants"][0]["CurrentInstanceCount"] == 1
    assert "FailureReason" not in described
    assert any(e["EndpointName"] == "life" for e in sm.list_endpoints()["Endpoints"])

    np.testing.assert_allclose(_predict(runtime, "life"), _expected(0), rtol=1e-5)
    # The default handler's CSV path, with a CSV Accept: same semantics as `tfbatch serve`.
    csv = runtime.invoke_endpoint(EndpointName="life", ContentType="text/csv", Body="1,2,3\n-1,0.5,4\n")
    np.testing.assert_allclose(json.loads(csv["Body"].read())["predictions"], _expected(0), rtol=1e-5)

    sm.delete_endpoint(EndpointName="life")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="life", WaiterConfig=FAST)
    gone = _error(lambda: sm.describe_endpoint(EndpointName="life"))
    assert gone["Error"]["Code"] == "ValidationException"
    assert gone["Error"]["Message"].startswith("Could not find endpoint")
    missing = _error(lambda: runtime.invoke_endpoint(EndpointName="life", Body=b"{}", ContentType="application/json"))
    assert missing["Error"]["Code"] == "ValidationError"
    assert missing["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_model_errors_in_aws_shape_and_logs(api, sm, runtime, artifacts):
    _model(sm, "err-m", artifacts["failing"])
    _config(sm, "err-c", "err-m")
    sm.create_endpoint(EndpointName="err", EndpointConfigName="err-c")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="err", WaiterConfig=FAST)

    with pytest.raises(runtime.exceptions.ModelError) as info:
        runtime.invoke_endpoint(EndpointName="err", ContentType="application/json", Body=b"[1]")
    error = info.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert error["OriginalStatusCode"] == 500
    assert "input_handler refuses [1]" in error["OriginalMessage"]
    assert error["LogStreamArn"].endswith(":log-group:/aws/sagemaker/Endpoints/err")

    # The serve process's own log lines land in the endpoint's log group, one stream per instance.
    logs = api.client("logs")
    group = "/aws/sagemaker/Endpoints/err"
    deadline = time.monotonic() + 60
    while True:
        streams = logs.describe_log_streams(logGroupName=group)["logStreams"]
        text = "\n".join(e["message"] for s in streams
                         for e in logs.get_log_events(logGroupName=group, logStreamName=s["logStreamName"])["events"])
        if "input_handler refuses" in text or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert streams and streams[0]["logStreamName"].startswith("AllTraffic/i-")
    assert "input_handler refuses" in text
    sm.delete_endpoint(EndpointName="err")


def test_bad_requests_get_aws_errors(sm, runtime, artifacts):
    missing_config = _error(lambda: sm.create_endpoint(EndpointName="nocfg", EndpointConfigName="no-such-config"))
    assert missing_config["Error"]["Code"] == "ValidationException"
    assert "Could not find endpoint configuration" in missing_config["Error"]["Message"]
    missing_model = _error(lambda: _config(sm, "nomodel-c", "no-such-model"))
    assert "Could not find model" in missing_model["Error"]["Message"]
    bad_name = _error(lambda: sm.create_endpoint(EndpointName="under_score", EndpointConfigName="x"))
    assert bad_name["Error"]["Code"] == "ValidationException" and "endpointName" in bad_name["Error"]["Message"]

    _model(sm, "dup-m", artifacts["seed0"])
    _config(sm, "dup-c", "dup-m")
    again = _error(lambda: _config(sm, "dup-c", "dup-m"))
    assert "Cannot create already existing endpoint configuration" in again["Error"]["Message"]
    sm.create_endpoint(EndpointName="dup", EndpointConfigName="dup-c")
    twice = _error(lambda: sm.create_endpoint(EndpointName="dup", EndpointConfigName="dup-c"))
    assert "Cannot create already existing endpoint" in twice["Error"]["Message"]
    if sm.describe_endpoint(EndpointName="dup")["EndpointStatus"] == "Creating":
        busy = _error(lambda: sm.update_endpoint(EndpointName="dup", EndpointConfigName="dup-c"))
        assert "Cannot update in-progress endpoint" in busy["Error"]["Message"]
    sm.get_waiter("endpoint_in_service").wait(EndpointName="dup", WaiterConfig=FAST)
    no_variant = _error(lambda: runtime.invoke_endpoint(EndpointName="dup", TargetVariant="Nope", Body=b"{}"))
    assert no_variant["Error"]["Code"] == "ValidationError"
    assert "has no production variant 'Nope'" in no_variant["Error"]["Message"]
    sm.delete_endpoint(EndpointName="dup")
    sm.delete_endpoint_config(EndpointConfigName="dup-c")
    assert _error(lambda: sm.describe_endpoint_config(EndpointConfigName="dup-c"))["Error"]["Code"] == \
        "ValidationException"


def test_a_model_that_cannot_load_fails_the_endpoint(sm, tmp_path):
    (tmp_path / "empty").mkdir()
    _model(sm, "broken-m", tmp_path / "empty")
    _config(sm, "broken-c", "broken-m")
    sm.create_endpoint(EndpointName="broken", EndpointConfigName="broken-c")
    with pytest.raises(WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="broken", WaiterConfig=FAST)
    described = sm.describe_endpoint(EndpointName="broken")
    assert described["EndpointStatus"] == "Failed"
    assert described["FailureReason"]
    sm.delete_endpoint(EndpointName="broken")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="broken", WaiterConfig=FAST)


def test_update_moves_to_the_new_model_without_failing_requests(sm, api, artifacts):
    _model(sm, "upd-a", artifacts["seed0"])
    _model(sm, "upd-b", artifacts["seed1"])
    _config(sm, "upd-ca", "upd-a")
    _config(sm, "upd-cb", "upd-b")
    sm.create_endpoint(EndpointName="upd", EndpointConfigName="upd-ca")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="upd", WaiterConfig=FAST)

    stop = threading.Event()
    answers: list[int] = []
    failures: list[str] = []

    def load() -> None:
        client = api.client("sagemaker-runtime", config=SLOW_READS)
        while not stop.is_set():
            try:
                got = _predict(client, "upd")
            except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                failures.append(repr(exc))
                continue
            answers.append(0 if np.allclose(got, _expected(0), rtol=1e-5) else
                           1 if np.allclose(got, _expected(1), rtol=1e-5) else -1)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        sm.update_endpoint(EndpointName="upd", EndpointConfigName="upd-cb")
        assert sm.describe_endpoint(EndpointName="upd")["EndpointStatus"] in ("Updating", "InService")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="upd", WaiterConfig=FAST)
        # Requests keep flowing after the switch until some have reached the new model.
        deadline = time.monotonic() + 60
        while answers.count(1) < 5 and time.monotonic() < deadline and not failures:
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == []
    assert -1 not in answers
    assert answers.count(0) > 0 and answers.count(1) >= 5
    assert answers.index(1) > 0 and 0 not in answers[len(answers) - answers[::-1].index(0):]
    assert sm.describe_endpoint(EndpointName="upd")["EndpointConfigName"] == "upd-cb"
    sm.delete_endpoint(EndpointName="upd")


def test_four_endpoints_survive_kill_9_and_restart(tmp_path, artifacts):
    server = ApiServer(tmp_path / "state", CREDENTIALS).start()
    try:
        sm = server.client("sagemaker")
        names = [f"four-{seed}" for seed in range(4)]
        for seed, name in enumerate(names):
            _model(sm, name, artifacts[f"seed{seed}"])
            _config(sm, name, name)
            sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
        for name in names:
            sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
        runtime = server.client("sagemaker-runtime", config=SLOW_READS)
        for seed, name in enumerate(names):
            np.testing.assert_allclose(_predict(runtime, name), _expected(seed), rtol=1e-5)
        old_pids = {p for p in _serve_pids(tmp_path / "state")}
        assert len(old_pids) == 4

        server.kill()
        server.start()
        sm = server.client("sagemaker")
        runtime = server.client("sagemaker-runtime", config=SLOW_READS)
        for name in names:
            sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
        for seed, name in enumerate(names):
            np.testing.assert_allclose(_predict(runtime, name), _expected(seed), rtol=1e-5)
        # The killed server's serve processes were stopped, not left holding memory and ports.
        for pid in old_pids:
            assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)
        for name in names:
            sm.delete_endpoint(EndpointName=name)
        for name in names:
            sm.get_waiter("endpoint_deleted").wait(EndpointName=name, WaiterConfig=FAST)
    finally:
        server.stop()


def _serve_pids(state_dir: Path, endpoint: str | None = None) -> list[int]:
    """The serve processes the server has on record (its SQLite state, read as a second reader)."""
    import sqlite3

    db = sqlite3.connect(state_dir / "state.sqlite3")
    try:
        rows = db.execute("SELECT key, doc FROM resources WHERE kind = 'endpoint'").fetchall()
    finally:
        db.close()
    return [p["pid"] for key, doc in rows if endpoint in (None, key)
            for p in json.loads(doc).get("_Processes", [])]


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_delete_while_creating_leaves_no_process(api, sm, artifacts):
    _model(sm, "gone-m", artifacts["seed0"])
    _config(sm, "gone-c", "gone-m")
    sm.create_endpoint(EndpointName="gone", EndpointConfigName="gone-c")
    sm.delete_endpoint(EndpointName="gone")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="gone", WaiterConfig=FAST)
    # The process that was starting is stopped once it notices; the deadline is a failure guard.
    run_dir = str(api.state_dir / "endpoints" / "gone")
    deadline = time.monotonic() + 120
    while _processes_under(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_under(run_dir) == []


def _processes_under(run_dir: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            if run_dir in cmdline and not _is_zombie(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_endpoints_past_the_limit_are_resource_limit_exceeded(tmp_path):
    server = ApiServer(tmp_path / "state", CREDENTIALS, "--max-endpoints", "1").start()
    try:
        sm = server.client("sagemaker")
        (tmp_path / "empty").mkdir()  # a model that fails at once: the limit counts endpoints, not healthy ones
        _model(sm, "lim-m", tmp_path / "empty")
        _config(sm, "lim-c", "lim-m")
        sm.create_endpoint(EndpointName="lim-1", EndpointConfigName="lim-c")
        over = _error(lambda: sm.create_endpoint(EndpointName="lim-2", EndpointConfigName="lim-c"))
        assert over["Error"]["Code"] == "ResourceLimitExceeded" and "--max-endpoints" in over["Error"]["Message"]
        sm.delete_endpoint(EndpointName="lim-1")
        sm.get_waiter("endpoint_deleted").wait(EndpointName="lim-1", WaiterConfig=FAST)
        sm.create_endpoint(EndpointName="lim-2", EndpointConfigName="lim-c")  # room again
    finally:
        server.stop()


def test_a_crashed_model_server_is_replaced(api, sm, artifacts):
    import os
    import signal

    _model(sm, "crash-m", artifacts["seed2"])
    _config(sm, "crash-c", "crash-m")
    sm.create_endpoint(EndpointName="crash", EndpointConfigName="crash-c")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="crash", WaiterConfig=FAST)
    # AWS keeps a running endpoint when its config is deleted; so must its replacement.
    sm.delete_endpoint_config(EndpointConfigName="crash-c")
    [pid] = [p for p in _serve_pids(api.state_dir, "crash")]
    os.kill(pid, signal.SIGKILL)  # the OOM killer's way
    runtime = api.client("sagemaker-runtime", config=SLOW_READS)
    deadline = time.monotonic() + 300  # a failure guard: the replacement loads its model meanwhile
    while True:
        pids = _serve_pids(api.state_dir, "crash")
        status = sm.describe_endpoint(EndpointName="crash")["EndpointStatus"]
        if status == "InService" and pids and pid not in pids:
            break
        assert status in ("InService", "SystemUpdating") and time.monotonic() < deadline, status
        time.sleep(0.2)
    np.testing.assert_allclose(_predict(runtime, "crash"), _expected(2), rtol=1e-5)
    sm.delete_endpoint(EndpointName="crash")
