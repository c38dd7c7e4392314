"""The console of a real ``tfbatch api`` process, in Debian's Chromium through Playwright: sign-in
with the console's own token, a transform job (boto3, a real TensorFlow model) whose page
matches its report, the log from CloudWatch Logs, failures shown as text, and an endpoint's
per-instance figures read from its serve process."""

from __future__ import annotations

import json
import stat


from tests.support.browser import chromium
from tfbatch.testing import models

ROLE = "arn:aws:iam::000000000000:role/test"
FAST = {"Delay": 1, "MaxAttempts": 300}  # a failure guard: waiters poll every second
BAD_KEY = "in/<img src=x onerror=alert(1)>.jsonl"


def _text(page, selector: str) -> str:
    return page.locator(selector).inner_text().strip()


def test_console_signs_in_with_its_own_token_and_shows_jobs_and_endpoints(api_server, s3_server, s3_bucket,
                                                                          tmp_path):
    api = api_server
    secret = api.secret
    token_file = api.state_dir / "console-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert token != secret and len(token) >= 16
    assert f"/console/login?token={token}" in api.log.read_text()  # printed at start

    model = models.make_linear_model(tmp_path / "linear" / "1").parent
    s3 = s3_server.client()
    for i in range(6):
        s3.put_object(Bucket=s3_bucket, Key=f"in/part-{i}.jsonl",
                      Body="".join(json.dumps([i, j, 1.5]) + "\n" for j in range(4)).encode())
    s3.put_object(Bucket=s3_bucket, Key=BAD_KEY, Body=b'[1, "<b>x</b>"]\n')  # not numbers: that record fails
    sm = api.client("sagemaker")
    sm.create_model(ModelName="linear", ExecutionRoleArn=ROLE,
                    PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": model.as_uri()})
    sm.create_transform_job(
        TransformJobName="console-job", ModelName="linear",
        TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{s3_bucket}/in/"}},
                        "ContentType": "application/json", "SplitType": "Line"},
        TransformOutput={"S3OutputPath": f"s3://{s3_bucket}/out", "AssembleWith": "Line"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 2})
    sm.create_endpoint_config(EndpointConfigName="cfg", ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": "linear", "InitialInstanceCount": 1,
         "InstanceType": "ml.m5.large"}])
    sm.create_endpoint(EndpointName="console-ep", EndpointConfigName="cfg")

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1100, "height": 1000})
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        # Not signed in: every console page sends the browser to the sign-in form.
        page.goto(f"{api.url}/console/jobs/console-job")
        assert page.url.startswith(f"{api.url}/console/login")
        page.fill("input[name=token]", secret)  # the AWS secret is not it
        page.click("button[type=submit]")
        assert "not the console token" in page.locator("main").inner_text()
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        page.wait_for_selector("#job-status")
        assert page.url == f"{api.url}/console/jobs/console-job"

        # The page follows the job by itself to its end (one record failed: Failed, as SageMaker).
        page.wait_for_selector("#job-status .status-Failed", timeout=300_000)
        described = sm.describe_transform_job(TransformJobName="console-job")
        assert described["TransformJobStatus"] == "Failed"
        report = json.loads(s3.get_object(Bucket=s3_bucket, Key="out/_tfbatch/report.json")["Body"].read())
        page.reload()  # what a later visit sees: the job's report and error report are read now
        assert _text(page, "#objects-done") == f"{report['objects']} / {report['objects']}" == "7 / 7"
        assert _text(page, "#records") == f"{report['records']:,}"
        assert _text(page, "#failed-records") == str(report["failed_records"]) == "1"
        assert page.locator("#failures td.object").first.inner_text() == BAD_KEY[len("in/"):]
        assert page.locator("main img").count() == 0 and dialogs == []
        assert "batch size" in _text(page, "#settings")
        assert described["FailureReason"][:40] in _text(page, "#job-message")
        assert "objects succeeded" in _text(page, "#log")  # the job's CloudWatch Logs lines
        page.screenshot(path=str(tmp_path / "api-job.png"), full_page=True)

        page.goto(f"{api.url}/console/jobs")
        assert _text(page, "tr[data-job='console-job'] td.objects") == "7 / 7"

        sm.get_waiter("endpoint_in_service").wait(EndpointName="console-ep", WaiterConfig=FAST)
        runtime = api.client("sagemaker-runtime")
        for _ in range(20):
            runtime.invoke_endpoint(EndpointName="console-ep", ContentType="application/json",
                                    Body=json.dumps({"instances": [[1.0, 2.0, 3.0]]}))
        page.goto(f"{api.url}/console/endpoints")
        row = page.locator("tr[data-endpoint='console-ep']").first
        cells = row.locator("td").all_inner_texts()
        assert cells[1] == "InService" and cells[2] == "linear"
        assert cells[6] != "—" and cells[8] == "20" and cells[9] == "0", cells  # P50 ms, requests, errors
        assert cells[4].startswith("AllTraffic i-")  # the variant and its instance
        # More traffic: the page (polling) shows it by itself, with a rate since its last look.
        for _ in range(10):
            runtime.invoke_endpoint(EndpointName="console-ep", ContentType="application/json",
                                    Body=json.dumps({"instances": [[1.0, 2.0, 3.0]]}))
        page.wait_for_function(
            "() => { const c = document.querySelectorAll(\"tr[data-endpoint='console-ep'] td\");"
            " return c.length > 9 && c[8].textContent === '30'; }", timeout=60_000)
        cells = page.locator("tr[data-endpoint='console-ep']").first.locator("td").all_inner_texts()
        assert float(cells[5]) > 0, cells  # requests/s between the two scrapes
        assert "linear" in page.goto(f"{api.url}/console/models").text()
        page.goto(f"{api.url}/console/endpoints")
        page.screenshot(path=str(tmp_path / "api-endpoints.png"), full_page=True)

    # JSON for scripts: a bearer token works, the AWS secret does not.
    import requests

    ok = requests.get(f"{api.url}/console/api/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert ok.status_code == 200 and ok.json()["rows"][0]["name"] == "console-job"
    no = requests.get(f"{api.url}/console/api/jobs", timeout=30,
                      headers={"Authorization": f"Bearer {secret}"})
    assert no.status_code == 401
    sm.delete_endpoint(EndpointName="console-ep")
