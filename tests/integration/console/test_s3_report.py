"""The console's reads and the static report on S3 (a real moto S3 server process): the report
file lands beside ``_tfbatch/report.json`` in the bucket, and failures are read from an
``errors.jsonl`` there, only as far as the page needs."""

from __future__ import annotations

import json

from tfbatch.console.source import read_failures
from tfbatch.console.static import StaticReport
from tfbatch.transform.report import ObjectResult, RecordFailure


def test_report_html_is_written_to_the_bucket_with_the_failures_from_s3(s3_server, s3_bucket):
    s3 = s3_server.client()
    lines = [json.dumps({"object": f"in/<i>{i}</i>.json", "record": i, "offset": 10 * i, "error": f"bad {i}"})
             for i in range(500)]
    s3.put_object(Bucket=s3_bucket, Key="out/_tfbatch/errors.jsonl", Body=("\n".join(lines) + "\n").encode())
    uri = f"s3://{s3_bucket}/out/_tfbatch/errors.jsonl"
    first = read_failures(uri, limit=3)
    assert [(f.object, f.record, f.offset, f.error) for f in first] == [
        ("in/<i>0</i>.json", 0, 0, "bad 0"), ("in/<i>1</i>.json", 1, 10, "bad 1"), ("in/<i>2</i>.json", 2, 20, "bad 2")]
    assert read_failures(f"s3://{s3_bucket}/out/_tfbatch/missing.jsonl") == []

    report = StaticReport(name="s3-job", instances=2, output=f"s3://{s3_bucket}/out")
    report.progress.set_total(2)
    report.progress.update(ObjectResult(key="in/a.json", ok=True, records=3))
    report.progress.update(ObjectResult(key="in/<i>0</i>.json", ok=False, records=1, failed_records=1,
                                        failures=[RecordFailure("in/<i>0</i>.json", 0, 0, "bad 0")]))
    written = report.write({"objects": 2, "records": 4, "failed": 1, "failed_records": 1, "instances": 2,
                            "error_report": uri, "records_per_second": 1.5})
    assert written == f"s3://{s3_bucket}/out/_tfbatch/report.html"
    html = s3.get_object(Bucket=s3_bucket, Key="out/_tfbatch/report.html")["Body"].read().decode()
    assert "in/&lt;i&gt;0&lt;/i&gt;.json" in html and "<i>0</i>" not in html
    assert html.count('<td class="object">') == 50  # the first 50 of 500, not the file
    assert '<span id="job-status"><span class="status status-Failed">Failed</span>' in html


def test_a_report_that_cannot_be_written_does_not_fail_the_job(s3_server, caplog):
    report = StaticReport(name="nowhere", instances=1, output="s3://no-such-bucket-for-tfbatch/out")
    assert report.write({"objects": 0}) is None
    assert "could not write the HTML report s3://no-such-bucket-for-tfbatch/out/_tfbatch/report.html" in caplog.text
