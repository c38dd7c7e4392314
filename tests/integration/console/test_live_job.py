"""The console in a real browser while a real job runs: Debian's Chromium through Playwright,
a uvicorn server on loopback, ``run_transform`` on two local worker processes with a real
TensorFlow model and a real ``inference.py``.

The job is held after its first objects by the one fault injected, at the progress callback
(the console's only hook into a run), so the page is seen while the job is in progress
whatever the machine's speed; the test then lets it go and waits, with Playwright's own
waiting, for the page to change by itself.
"""

from __future__ import annotations

import json
import textwrap
import threading

import pytest

from tfbatch import run_transform
from tfbatch.artifact import package
from tfbatch.console.app import console_app
from tfbatch.console.board import JobBoard
from tfbatch.testing.models import make_linear_model
from tests.support.browser import chromium, serving

HELD_AFTER = 6
OBJECTS = 24
MARKUP_KEY = '<img src=x onerror="document.title=1">.json'
SCRIPT = """
import json

def input_handler(data, context):
    body = json.loads(data.read())
    if "boom" in body:
        raise ValueError(body["boom"])
    return json.dumps({"instances": body["x"]})

def output_handler(response, context):
    return response.content, "application/json"
"""
BOOM = "<b>boom</b> & <script>document.title='pwned'</script>"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-model")
    make_linear_model(root / "model" / "1")
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text(textwrap.dedent(SCRIPT))
    return package([root / "model" / "1"], root / "model.tar.gz", code_dir=root / "code")


def _inputs(folder):
    folder.mkdir()
    for i in range(OBJECTS):
        (folder / f"obj-{i:03d}.json").write_text(json.dumps({"x": [[i, 1.0, 2.0], [0.5, i, 1.0]]}))
    (folder / MARKUP_KEY).write_text(json.dumps({"boom": BOOM}))


def _text(page, selector: str) -> str:
    return page.locator(selector).inner_text().strip()


def test_a_running_job_page_updates_itself_and_matches_the_report(model, tmp_path):
    _inputs(tmp_path / "in")
    board = JobBoard()
    job = board.start("live-job", instances=2, output=str(tmp_path / "out"))
    held, release = threading.Event(), threading.Event()
    update = job.progress.update

    def held_update(result):  # the injected fault: the callback stalls after the first objects
        update(result)
        if job.aggregator.totals()[0] == HELD_AFTER:
            held.set()
            assert release.wait(300), "the test never released the job"

    job.progress.update = held_update
    undo_logs = job.capture_logs()
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["report"] = run_transform(model=str(model), input=str(tmp_path / "in"),
                                              output=str(tmp_path / "out"), content_type="application/json",
                                              instance_count=2, handler_workers=0, progress=job.progress)
            job.finish(outcome["report"])
        except BaseException as exc:
            outcome["error"] = exc
            job.fail(exc)
            release.set()

    runner = threading.Thread(target=run, name="console-test-job")
    runner.start()
    dialogs: list[str] = []
    try:
        with serving(console_app(board)) as url, chromium() as browser:
            page = browser.new_page(viewport={"width": 1100, "height": 1000})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{url}/console/jobs/live-job")
            assert _text(page, "#job-status") == "InProgress"
            assert held.wait(300), f"the job did not reach {HELD_AFTER} objects: {outcome}"
            # The page refreshes itself: no reload, Playwright waits for the DOM to say so.
            page.wait_for_function(
                "n => document.querySelector('#objects-done').textContent.startsWith(n + ' / ')",
                arg=str(HELD_AFTER), timeout=60_000)
            assert _text(page, "#objects-done") == f"{HELD_AFTER} / {OBJECTS + 1}"
            assert _text(page, "#job-status") == "InProgress"
            page.screenshot(path=str(tmp_path / "job-in-progress.png"), full_page=True)

            # The jobs list follows the job too: let it go and wait for its row to end.
            page.goto(f"{url}/console/jobs")
            assert _text(page, "tr[data-job='live-job'] td.objects") == f"{HELD_AFTER} / {OBJECTS + 1}"
            release.set()
            page.wait_for_selector("tr[data-job='live-job'] .status-Failed", timeout=300_000)  # one object failed
            assert _text(page, "tr[data-job='live-job'] td.objects") == f"{OBJECTS + 1} / {OBJECTS + 1}"
            page.screenshot(path=str(tmp_path / "jobs-list.png"), full_page=True)
            page.goto(f"{url}/console/jobs/live-job")
            page.wait_for_selector("#job-status .status-Failed")
            report = outcome["report"].to_dict()
            assert _text(page, "#objects-done") == f"{report['objects']} / {OBJECTS + 1}"
            assert _text(page, "#records") == f"{report['records']:,}"
            assert _text(page, "#records-per-second") == f"{report['records_per_second']:,.1f}"
            assert _text(page, "#failed-records") == str(report["failed_records"])
            assert _text(page, "#failed-objects") == str(report["failed"]) == "1"
            assert (report["objects"], report["records"]) == (OBJECTS + 1, OBJECTS + 1)

            # The failure shows the user's key and message as text, and nothing in them ran.
            assert page.locator("#failures td.object").first.inner_text() == MARKUP_KEY
            assert BOOM in page.locator("#failures td.error").first.inner_text()
            assert page.locator("main img").count() == 0 and page.locator("main b").count() == 0
            assert page.title().endswith("tfbatch") and dialogs == []
            log_text = _text(page, "#log")  # the job's own warning, captured from its logger
            assert f"{MARKUP_KEY}: 1 of " in log_text and BOOM in log_text
            assert _text(page, "#job-details tr:nth-child(3) td") != "—"  # ended: the whole page refreshed
            assert page.locator("#settings td").count() > 0

            # The charts are drawn from the aggregates: per instance, summing to the report.
            lasts = page.eval_on_selector_all(
                "#chart-objects polyline", "ls => ls.map(l => [l.dataset.label, Number(l.dataset.last)])")
            per_instance = {label: last for label, last in lasts}
            assert per_instance["instance 0"] + per_instance["instance 1"] == report["objects"]
            assert per_instance["all"] == report["objects"]
            counts = page.eval_on_selector_all("#instances tr td:nth-child(2)", "ts => ts.map(t => t.textContent)")
            assert sum(int(c) for c in counts) == report["objects"] and len(counts) == 2
            page.screenshot(path=str(tmp_path / "job-finished.png"), full_page=True)

            # A stopped job's page stays readable: it stops polling and a reload draws the same.
            page.reload()
            assert _text(page, "#objects-done") == f"{report['objects']} / {OBJECTS + 1}"
            assert page.locator("[data-final]").count() == 1
    finally:
        release.set()
        runner.join(timeout=300)
        undo_logs()
    assert "error" not in outcome, outcome.get("error")
