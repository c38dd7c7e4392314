"""The CLI: --job JSON with flags overriding, --dry-run plans; the progress display."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from tfbatch.cli import build_parser
from tfbatch.transform.cli import spec_from_args
from tfbatch.transform.progress import Progress
from tfbatch.transform.report import ObjectResult

JOB = {
    "TransformJobName": "x",
    "ModelName": "ignored",
    "TransformInput": {"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/in/"}},
                       "ContentType": "text/csv", "SplitType": "Line", "CompressionType": "Gzip"},
    "TransformOutput": {"S3OutputPath": "s3://b/out/", "AssembleWith": "Line", "Accept": "text/csv"},
    "TransformResources": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2},
    "BatchStrategy": "MultiRecord",
    "MaxPayloadInMB": 0,
    "Environment": {"A": "1"},
    "DataProcessing": {"InputFilter": "$[1:]", "JoinSource": "Input"},
    "ModelClientConfig": {"InvocationsTimeoutInSeconds": 30, "InvocationsMaxRetries": 1},
}


def test_job_file_with_flags_overriding(tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps(JOB))
    args = build_parser().parse_args(["transform", "--model", "m.tar.gz", "--job", str(job),
                                      "--instance-count", "1", "--env", "B=2", "--input", "/data"])
    spec = spec_from_args(args)
    assert (spec.input, spec.manifest, spec.output) == ("/data", None, "s3://b/out/")
    assert (spec.split_type, spec.compression, spec.batch_strategy, spec.max_payload_mb) == ("Line", "Gzip", "MultiRecord", 0)
    assert spec.instance_count == 1 and spec.env == {"A": "1", "B": "2"}
    assert (spec.input_filter, spec.join_source, spec.invocations_timeout, spec.invocations_max_retries) == ("$[1:]", "Input", 30, 1)


def test_dry_run_prints_the_plan_without_loading_a_model(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(7):
        (inp / f"{i}.jpg").write_bytes(b"x" * 10)
    proc = subprocess.run([sys.executable, "-m", "tfbatch", "transform", "--model", str(tmp_path / "nowhere"),
                           "--input", str(inp), "--output", str(tmp_path / "out"), "--instance-count", "3",
                           "--dry-run"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "plan: 7 objects" in proc.stdout and "0 already done, 7 to run" in proc.stdout
    counts = [int(line.split(":")[1].split()[0]) for line in proc.stdout.splitlines() if line.strip().startswith("instance ")]
    assert len(counts) == 3 and sum(counts) == 7
    assert not (tmp_path / "out").exists()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_tty_and_log_lines_otherwise():
    tty = _Tty()
    bar = Progress("auto", tty, interval_s=0)
    bar.set_total(4)
    for i in range(2):
        bar.update(ObjectResult(key=str(i), ok=True, records=10))
    bar.close()
    text = tty.getvalue()
    assert text.startswith("\r[") and "2/4 objects" in text and "20 records" in text and "ETA" in text
    assert "records/s" in text and text.endswith("\n")

    plain = io.StringIO()
    log = Progress("auto", plain, interval_s=0)
    log.update(ObjectResult(key="a", ok=False, records=3, failed_records=1))
    log.close()
    assert "\r" not in plain.getvalue() and plain.getvalue().startswith("[tfbatch transform] 1 objects")
    assert "1 failed" in plain.getvalue()
