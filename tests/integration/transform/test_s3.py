"""Input, output, manifest and model on s3:// against a real S3-API server process (moto)."""

from __future__ import annotations

import json
import tarfile

import numpy as np

from tfbatch import run_transform
from tfbatch.testing.models import linear_expected


def test_everything_on_s3_and_resume(tmp_path, linear_model, s3_bucket, s3_server):
    s3 = s3_server.client()
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(linear_model / "1", arcname="1")
    s3.upload_file(str(archive), s3_bucket, "models/model.tar.gz")
    rows = {"in/a.jsonl": [[1, 2, 3], [4, 5, 6]], "in/sub/b.jsonl": [[0, 0, 1]], "in/c.jsonl": [[9, 9, 9]]}
    for key, data in rows.items():
        s3.put_object(Bucket=s3_bucket, Key=key, Body="".join(json.dumps(r) + "\n" for r in data).encode())
    manifest = [{"prefix": f"s3://{s3_bucket}/in/"}, "a.jsonl", "sub/b.jsonl"]
    s3.put_object(Bucket=s3_bucket, Key="manifest.json", Body=json.dumps(manifest).encode())
    common = dict(model=f"s3://{s3_bucket}/models/model.tar.gz", manifest=f"s3://{s3_bucket}/manifest.json",
                  output=f"s3://{s3_bucket}/out", split_type="Line", content_type="application/json",
                  assemble_with="Line")
    report = run_transform(**common)
    assert report.ok and report.objects == 2, report.summary()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix="out/")["Contents"])
    assert [k for k in keys if k.endswith(".out")] == ["out/a.jsonl.out", "out/sub/b.jsonl.out"]
    assert "out/_tfbatch/report.json" in keys
    body = s3.get_object(Bucket=s3_bucket, Key="out/a.jsonl.out")["Body"].read()
    got = [json.loads(line)["predictions"][0] for line in body.splitlines()]
    np.testing.assert_allclose(got, linear_expected(np.array([[1, 2, 3], [4, 5, 6]], np.float32)), rtol=1e-5)
    again = run_transform(**common)
    assert again.objects == 0 and again.skipped == 2
