"""The README's command reference, executed as written.

Each command is read out of README.md's "## Commands" block, not copied here: its required
part runs verbatim (relative paths such as ``data/`` and ``model.tar.gz`` resolve in one
working folder), placeholders the README spells in capitals are swapped for real paths, and
optional flags are taken only if the README lists them. A command added to the README fails
``test_every_readme_command_is_run_or_skipped_for_a_reason`` until it is run here or given a
reason not to be. Sizes are kept small with flags appended after the README's own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tfbatch.ports import free_ports
from tfbatch.train.inference_template import write_inference_script

ROOT = Path(__file__).resolve().parents[2]

# Run below ('train --engine ray' is tests/integration/train/test_ray_train.py).
RUN_HERE = {"inspect", "package", "transform", "serve", "api", "data digits", "train", "evaluate"}
NOT_RUN = {"data cifar10": "needs cifar-10-python.tar.gz, a 163 MB download"}


@dataclass
class ReadmeCommand:
    words: list[str]  # the required part, shell-split
    options: list[list[str]]  # each optional [group], shell-split

    @property
    def key(self) -> str:
        name = self.words[1]
        return f"{name} {self.words[2]}" if name == "data" else name

    def option(self, flag: str) -> list[str]:
        for group in self.options:
            if group[0] == flag:
                return group
        raise AssertionError(f"README no longer offers {flag} for 'tfbatch {self.key}'")


def _split_brackets(text: str) -> tuple[str, list[str]]:
    """The text outside top-level [...] groups, and each group's inside ('$[1:]' nests)."""
    required, groups, depth, current = [], [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth == 1:
                current = []
                continue
        elif char == "]":
            depth -= 1
            if depth == 0:
                groups.append("".join(current))
                continue
        (current if depth else required).append(char)
    assert depth == 0, f"unbalanced brackets in README command: {text}"
    return "".join(required), groups


def readme_commands() -> dict[str, ReadmeCommand]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = {}
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if not line.startswith("tfbatch "):
            continue
        required, groups = _split_brackets(line)
        # A lone "..." marks the group before it as repeatable.
        words = [w for w in shlex.split(required) if w != "..."]
        command = ReadmeCommand(words, [shlex.split(g) for g in groups])
        commands[command.key] = command
    return commands


COMMANDS = readme_commands()


def substitute(words: list[str], **values: str) -> list[str]:
    """Replace README placeholders (whole words) with real values; each must be present."""
    out = list(words)
    for placeholder, value in values.items():
        assert placeholder in out, f"README placeholder {placeholder!r} not in {words}"
        out[out.index(placeholder)] = value
    return out


def tfbatch_executable() -> list[str]:
    script = Path(sys.executable).parent / "tfbatch"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "tfbatch"]


def run(words: list[str], cwd: Path, *extra: str, timeout: int = 300) -> str:
    assert words[0] == "tfbatch"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([*tfbatch_executable(), *words[1:], *extra], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{shlex.join(words + list(extra))}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_every_readme_command_is_run_or_skipped_for_a_reason():
    assert set(COMMANDS) == RUN_HERE | set(NOT_RUN), sorted(COMMANDS)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """data/ and eval/ from 'tfbatch data digits', run/ from 'tfbatch train', model.tar.gz."""
    work = tmp_path_factory.mktemp("readme")
    out = run(COMMANDS["data digits"].words, work)
    assert json.loads(out)["counts"]["eval"] == 450
    assert len(list((work / "eval").glob("*.png"))) == 450
    # The README's training command as written, made short: the demo test trains for real.
    run(COMMANDS["train"].words, work, "--epochs", "1", "--steps-per-epoch", "4", "--pad", "0", "--no-flip",
        "--probabilities-only")
    assert (work / "run" / "export" / "1" / "saved_model.pb").is_file()
    write_inference_script(work / "code")  # the user's own code/ folder
    package = COMMANDS["package"]
    words = substitute(package.words, **{"SAVEDMODEL...": "run/export/1"})
    code = substitute(package.option("--code"), DIR="code")
    assert run(words, work, *code).strip() == "model.tar.gz"
    assert (work / "model.tar.gz").is_file()
    return work


def test_inspect(workdir):
    command = COMMANDS["inspect"]
    text = run(command.words, workdir)
    assert "serving_default" in text
    info = json.loads(run(command.words, workdir, *command.option("--json")))
    assert info["code"]["inference_script"] is True
    assert "serving_default" in info["models"][info["default_model"]]["versions"]["1"]["signatures"]


def test_transform_then_evaluate(workdir):
    transform = substitute(COMMANDS["transform"].words, **{"DIR_OR_s3://b/prefix": "eval", "DIR_OR_s3://b/out": "out"})
    run(transform, workdir, "--progress", "off")
    assert len(list((workdir / "out").glob("*.png.out"))) == 450
    run(COMMANDS["evaluate"].words, workdir)
    report = json.loads((workdir / "report" / "evaluation.json").read_text())
    assert report["total"] == 450 and 0.0 <= report["accuracy"] <= 1.0
    assert (workdir / "report" / "confusion_matrix.png").is_file()


def test_serve_answers_then_stops_on_sigterm(workdir):
    command = COMMANDS["serve"]
    port, grpc_port = free_ports(2, "127.0.0.1")
    flags = [*substitute(command.option("--port"), **{"8080": str(port)}),
             *substitute(command.option("--grpc-port"), **{"9000": str(grpc_port)})]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    log = open(workdir / "serve.log", "w")
    proc = subprocess.Popen([*tfbatch_executable(), *command.words[1:], *flags], cwd=workdir, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(1200):  # until it answers; the bound only turns a hang into a failure
            assert proc.poll() is None, (workdir / "serve.log").read_text()
            try:
                if requests.get(f"{url}/ping", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        png = sorted((workdir / "eval").glob("*.png"))[0].read_bytes()
        r = requests.post(f"{url}/invocations", data=png, headers={"Content-Type": "application/x-image"}, timeout=60)
        assert r.status_code == 200, r.text
        assert len(r.json()["predictions"][0]) == 10
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        log.close()
    assert code == 0


def test_api_runs_a_boto3_transform_job_then_stops_on_sigterm(workdir):
    import shutil

    import boto3

    command = COMMANDS["api"]
    (port,) = free_ports(1, "127.0.0.1")
    flags = [*substitute(command.option("--port"), **{"8000": str(port)}),
             *substitute(command.option("--state-dir"), DIR="api-state")]
    images = workdir / "api-in"
    images.mkdir()
    for png in sorted((workdir / "eval").glob("*.png"))[:12]:
        shutil.copy(png, images / png.name)
    creds = {"AWS_ACCESS_KEY_ID": "AKIDREADME", "AWS_SECRET_ACCESS_KEY": "readme-secret",
             "AWS_DEFAULT_REGION": "us-east-1"}
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **creds}
    log = open(workdir / "api.log", "w")
    proc = subprocess.Popen([*tfbatch_executable(), *command.words[1:], *flags], cwd=workdir, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        sm = boto3.client("sagemaker", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"])
        for _ in range(1200):  # until it answers; the bound only turns a hang into a failure
            assert proc.poll() is None, (workdir / "api.log").read_text()
            try:
                sm.list_models()
                break
            except Exception:  # noqa: BLE001 - not listening yet
                time.sleep(0.1)
        sm.create_model(ModelName="digits", ExecutionRoleArn="arn:aws:iam::000000000000:role/readme",
                        PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": (workdir / "model.tar.gz").as_uri()})
        sm.create_transform_job(
            TransformJobName="readme", ModelName="digits",
            TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix",
                                                            "S3Uri": images.as_uri() + "/"}},
                            "ContentType": "application/x-image"},
            TransformOutput={"S3OutputPath": (workdir / "api-out").as_uri() + "/"},
            TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1})
        sm.get_waiter("transform_job_completed_or_stopped").wait(
            TransformJobName="readme", WaiterConfig={"Delay": 1, "MaxAttempts": 600})
        described = sm.describe_transform_job(TransformJobName="readme")
        assert described["TransformJobStatus"] == "Completed", described.get("FailureReason")
        outs = sorted((workdir / "api-out").glob("*.png.out"))
        assert len(outs) == 12
        assert len(json.loads(outs[0].read_text())["predictions"][0]) == 10
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        log.close()
    assert code == 0, (workdir / "api.log").read_text()[-3000:]
    assert (workdir / "api-state" / "state.sqlite3").is_file()
