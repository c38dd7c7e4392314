"""The ``tfbatch`` command line: inspect and package on a real SavedModel, errors exit 2."""

import json
import os
import subprocess
import sys

import pytest

from tfbatch.testing.models import make_multi_io_model


def tfbatch(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "tfbatch", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    make_multi_io_model(root / "sm")
    code = root / "code"
    code.mkdir()
    (code / "inference.py").write_text("def handler(data, context):\n    return data.read(), 'text/plain'\n")
    out = root / "model.tar.gz"
    proc = tfbatch("package", str(root / "sm"), "--code", str(code), "-o", str(out))
    assert proc.stdout.strip() == str(out)
    return out


def test_inspect_json_lists_models_versions_signatures(archive):
    info = json.loads(tfbatch("inspect", str(archive), "--json").stdout)
    assert info["default_model"] == "model"
    version = info["models"]["model"]["versions"]["1"]
    sig = version["signatures"]["serving_default"]
    assert sig["inputs"]["a"]["dtype"] == "float32"
    assert sig["inputs"]["a"]["shape"] == [-1, 2]
    assert sig["inputs"]["b"]["dtype"] == "int64"
    assert set(sig["outputs"]) == {"sum", "prod"}
    assert "scaled" in version["signatures"]
    assert info["code"]["inference_script"] is True


def test_inspect_text_names_inputs_and_outputs(archive):
    text = tfbatch("inspect", str(archive)).stdout
    for word in ("serving_default", "scaled", "float32", "int64", "sum", "prod"):
        assert word in text


def test_unsafe_or_missing_model_is_a_clear_error(tmp_path):
    proc = tfbatch("inspect", str(tmp_path / "missing.tar.gz"), check=False)
    assert proc.returncode == 2
    assert "missing.tar.gz" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---- exit statuses (README "Exit status"): 0 ok, 1 records failed, 2 usage/config, 3 infrastructure ----

def test_version_names_the_package_version():
    from tfbatch import __version__

    assert tfbatch("--version").stdout.startswith(f"tfbatch {__version__} ")


def test_unknown_flag_is_a_usage_error():
    proc = tfbatch("inspect", "model.tar.gz", "--no-such-flag", check=False)
    assert proc.returncode == 2 and "--no-such-flag" in proc.stderr


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    from tfbatch.testing.models import make_linear_model

    root = tmp_path_factory.mktemp("linear")
    make_linear_model(root / "1")
    return root


def test_failed_records_exit_1_and_good_ones_still_land(tmp_path, linear):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.jsonl").write_text("[1, 2, 3]\n[1, 2]\n")  # second record has the wrong width
    proc = tfbatch("transform", "--model", str(linear), "--input", str(tmp_path / "in"), "--output",
                   str(tmp_path / "out"), "--content-type", "application/json", "--split-type", "Line", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "1 failed" in proc.stdout
    assert (tmp_path / "out" / "_tfbatch" / "errors.jsonl").read_text().count("\n") == 1


def test_a_job_json_setting_tfbatch_cannot_honour_exits_2(tmp_path, linear):
    job = {"TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": str(tmp_path)}}},
           "TransformOutput": {"S3OutputPath": str(tmp_path / "out")},
           "DataCaptureConfig": {"DestinationS3Uri": "s3://bucket/capture"}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    proc = tfbatch("transform", "--model", str(linear), "--job", str(tmp_path / "job.json"), check=False)
    assert proc.returncode == 2
    assert "DataCaptureConfig" in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_storage_is_an_infrastructure_error_exit_3(tmp_path, linear):
    import os
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1", "TFBATCH_STORAGE_ATTEMPTS": "1"}
    env.pop("AWS_ENDPOINT_URL_S3", None)
    proc = subprocess.run([sys.executable, "-m", "tfbatch", "transform", "--model", str(linear), "--input",
                           "s3://bucket/in/", "--output", str(tmp_path / "out"), "--content-type",
                           "application/json"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr


# runtime.exit.end (the command's exit): once TensorFlow is imported the command skips the interpreter's teardown, but not
# what anyone can observe of an exit. The child says when it has reached end(); only then
# does the test let its non-daemon thread finish, so an end() that did not wait for the
# thread would exit before the thread's file exists.
END_SCRIPT = r"""
import atexit, pathlib, sys, threading
import tensorflow
from tfbatch.runtime.exit import end

out = pathlib.Path(sys.argv[1])
def late():
    sys.stdin.readline()
    (out / "thread").write_text("joined")
threading.Thread(target=late).start()
atexit.register(lambda: (out / "atexit").write_text("ran"))
sys.stdout.write("last words without a newline")  # a pipe: block-buffered until flushed
sys.stderr.write("reached end\n"); sys.stderr.flush()
end(7)
"""


@pytest.mark.parametrize("full", ["0", "1"])
def test_the_exit_joins_threads_runs_atexit_and_flushes_output(tmp_path, full):
    env = {**os.environ, "TFBATCH_FULL_EXIT": full}
    proc = subprocess.Popen([sys.executable, "-c", END_SCRIPT, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for line in proc.stderr:
        if line == "reached end\n":
            break
    assert proc.poll() is None and not (tmp_path / "thread").exists()
    out, _ = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 7
    assert out == "last words without a newline"
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "atexit").read_text() == "ran"
