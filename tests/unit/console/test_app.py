"""The console's routes over a JobBoard, in-process through the ASGI app: pages, JSON, escaping, auth."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from tfbatch.console.app import COOKIE, console_app, mount_console
from tfbatch.console.board import JobBoard
from tfbatch.console.source import EndpointRow, ModelRow, WorkerStats
from tfbatch.transform.report import ObjectResult, RecordFailure

MARKUP_KEY = '<img src=x onerror="alert(1)">.png'
MARKUP_ERROR = "<script>alert('boom')</script> & more"
TOKEN = "console-token-0123456789"


class Elements(HTMLParser):
    """Every element and attribute a page would really create in a browser."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _board(jobs: int = 3) -> JobBoard:
    board = JobBoard(
        endpoints=lambda: [EndpointRow("ep-<b>1</b>", "InService", "model-a", 1.7e9, workers=[
            WorkerStats("worker 0", 12.5, 3.2, 9.9, 1, 100), WorkerStats("worker 1", 7.5, 4.0, 11.0, 0, 60)])],
        models=lambda: [ModelRow("model-a", "s3://b/model.tar.gz", 1.7e9)])
    for i in range(jobs):
        job = board.start(f"job-{i:05d}", instances=2, output=f"/out/{i}")
        job.created = job.started = 1.7e9 + i  # newest = highest number
        if i % 2 == 0:
            job.finish({"objects": 10, "records": 40, "failed": 0, "records_per_second": 4.0, "instances": 2})
    return board


def _failing_job(board: JobBoard) -> None:
    job = board.start(MARKUP_KEY, instances=1, output="/out/x")
    job.progress.update(ObjectResult(key=MARKUP_KEY, ok=False, records=3, failed_records=1,
                                     failures=[RecordFailure(MARKUP_KEY, 2, 1234, MARKUP_ERROR)]))
    job.logs.lines.append(f"WARNING {MARKUP_KEY}: {MARKUP_ERROR}")


def test_jobs_list_newest_first_with_paging_and_a_status_filter():
    client = TestClient(console_app(_board(120)))
    page = client.get("/console/jobs")
    assert page.status_code == 200
    names = [a["data-job"] for tag, a in Elements(page.text).tags if tag == "tr" and "data-job" in a]
    assert names == [f"job-{i:05d}" for i in range(119, 69, -1)]  # 50 a page, newest first
    assert "1–50 of 120" in page.text and 'rel="next"' in page.text
    second = client.get("/console/jobs?offset=50")
    assert "51–100 of 120" in second.text and 'rel="previous"' in second.text
    done = client.get("/console/api/jobs?status=Completed&limit=500").json()
    assert done["total"] == 60 and all(r["status"] == "Completed" for r in done["rows"])
    assert client.get("/", follow_redirects=False).headers["location"] == "/console/jobs"


def test_bad_query_parameters_are_refused_by_name():
    client = TestClient(console_app(_board()))
    r = client.get("/console/api/jobs?limit=100000")
    assert r.status_code == 400 and r.json()["error"] == "limit must be a whole number from 1 to 500, got 100000"
    r = client.get("/console/jobs?status=<b>Done</b>")
    assert r.status_code == 400 and "status must be one of InProgress" in r.text
    assert "<b>Done</b>" not in r.text and "&lt;b&gt;Done&lt;/b&gt;" in r.text
    assert client.get("/console/jobs/nope").status_code == 404


def test_markup_in_keys_errors_names_and_logs_shows_as_text():
    board = _board()
    _failing_job(board)
    client = TestClient(console_app(board))
    for path in ("/console/jobs", f"/console/jobs/{MARKUP_KEY}", f"/console/jobs/{MARKUP_KEY}/live",
                 "/console/endpoints", "/console/models"):
        r = client.get(path)
        assert r.status_code == 200, path
        tags = Elements(r.text).tags
        assert not [t for t, _a in tags if t == "img"], path
        assert [a.get("src") for t, a in tags if t == "script"] in ([], ["/console/static/console.js"]), path
        assert not any(k.startswith("on") for _t, a in tags for k in a), path
        assert "script-src 'self'" in r.headers["content-security-policy"]
    page = client.get(f"/console/jobs/{MARKUP_KEY}").text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;.png" in page
    assert "&lt;script&gt;alert(&#x27;boom&#x27;)&lt;/script&gt; &amp; more" in page
    assert "ep-&lt;b&gt;1&lt;/b&gt;" in client.get("/console/endpoints").text
    detail = client.get(f"/console/api/jobs/{MARKUP_KEY}").json()
    assert detail["failures"] == [{"object": MARKUP_KEY, "record": 2, "offset": 1234, "error": MARKUP_ERROR}]


def test_a_page_does_not_grow_with_the_job():
    board = JobBoard()
    medium, huge = board.start("medium", instances=4), board.start("huge", instances=4)
    huge.aggregator.set_total(10_000_000)
    for job, n in ((medium, 20_000), (huge, 200_000)):
        clock = [0.0]
        job.aggregator.clock = lambda: clock[0]
        job.aggregator.started = 0.0
        for i in range(n):
            clock[0] = i * 0.05
            job.aggregator.observe(ObjectResult(key=str(i), ok=True, records=1))
    client = TestClient(console_app(board))
    medium_page, huge_page = client.get("/console/jobs/medium").text, client.get("/console/jobs/huge").text
    assert "200,000 / 10,000,000" in huge_page
    detail = client.get("/console/api/jobs/huge").json()["job"]
    assert sum(c["objects"] for c in detail["instances"]) == 200_000 and len(detail["instances"]) == 4
    assert huge_page.count("<tr><td>") >= 4  # the per-instance table
    assert len(huge_page) < 1.1 * len(medium_page) and len(huge_page) < 150_000  # ten times the objects
    series = client.get("/console/api/jobs/huge/progress").json()
    assert sorted(series) == ["0", "1", "2", "3"] and all(len(p) <= 513 for p in series.values())
    assert sum(p[-1][1] for p in series.values()) == 200_000


def test_endpoints_show_each_worker_and_models_are_listed():
    client = TestClient(console_app(_board()))
    data = client.get("/console/api/endpoints").json()
    assert [w["worker"] for w in data[0]["workers"]] == ["worker 0", "worker 1"]
    page = client.get("/console/endpoints").text
    for text in ("InService", "model-a", "12.5", "9.9", "11.0", "worker 1"):
        assert text in page
    assert "s3://b/model.tar.gz" in client.get("/console/models").text


def test_with_a_token_the_console_needs_a_login_and_never_takes_a_wrong_one():
    client = TestClient(console_app(_board(), token=TOKEN))
    r = client.get("/console/jobs/job-00001", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/login?next=/console/jobs/job-00001"
    assert client.get("/console/api/jobs").status_code == 401
    assert client.get("/console/jobs/job-00001/live").status_code == 401
    wrong = client.post("/console/login", data={"token": "not-it"}, follow_redirects=False)
    assert wrong.status_code == 401 and COOKIE not in wrong.cookies
    r = client.post("/console/login?next=/console/jobs/job-00001", data={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/jobs/job-00001"
    cookie = r.cookies[COOKIE]
    assert TOKEN not in cookie and "httponly" in r.headers["set-cookie"].lower()
    assert client.get("/console/jobs/job-00001").status_code == 200  # the client kept the cookie
    bearer = TestClient(console_app(_board(), token=TOKEN))
    assert bearer.get("/console/api/jobs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert bearer.get("/console/api/jobs", headers={"Authorization": "Bearer x" + TOKEN}).status_code == 401
    # after signing in, only a path inside the console is followed
    r = bearer.get(f"/console/login?token={TOKEN}&next=//evil.example/", follow_redirects=False)
    assert r.headers["location"] == "/console/jobs"
    with pytest.raises(ValueError, match="at least 16 characters"):
        console_app(_board(), token="short")


def test_mounted_beside_an_api_the_apis_own_routes_still_answer():
    async def api_root(request):
        return PlainTextResponse("api:" + request.headers.get("x-amz-target", ""))

    app = Starlette(routes=[Route("/", api_root, methods=["POST"])])
    mount_console(app, _board(), token=TOKEN)
    client = TestClient(app)
    assert client.post("/", headers={"X-Amz-Target": "SageMaker.ListModels"}).text == "api:SageMaker.ListModels"
    assert client.get("/", follow_redirects=False).headers["location"] == "/console/jobs"
    assert client.get("/console/static/console.js").headers["content-type"].startswith("text/javascript")
    assert json.loads(client.get("/console/api/models", headers={"Authorization": f"Bearer {TOKEN}"}).text)[0][
        "name"] == "model-a"
