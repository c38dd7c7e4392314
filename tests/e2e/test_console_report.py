"""``tfbatch transform`` with no server writes ``_tfbatch/report.html``; a real browser opens the
file and finds the job's report in it: the numbers, the per-instance charts, the failures
(markup in a key shown as text), and nothing that runs."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
from PIL import Image

from tfbatch.testing.models import make_image_bytes_model
from tests.support.browser import chromium

BAD_KEY = '<img src=x onerror="document.title=1">.png'


def _png(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (8, 8), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_transform_writes_a_static_html_report_a_browser_reads(tmp_path):
    model = make_image_bytes_model(tmp_path / "model" / "1").parent
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(40):
        (inp / f"{i:03d}.png").write_bytes(_png(i))
    (inp / BAD_KEY).write_bytes(b"<b>not a png</b>")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tfbatch", "transform", "--model", str(model), "--input", str(inp),
                           "--output", str(out), "--content-type", "application/x-image", "--instance-count", "2",
                           "--progress", "off"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr  # one object failed
    report = json.loads((out / "_tfbatch" / "report.json").read_text())
    html_file = out / "_tfbatch" / "report.html"
    assert "<script" not in html_file.read_text()  # a file for any viewer: nothing in it runs

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1100, "height": 1000})
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(html_file.as_uri())
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        text = {sel: page.locator(sel).inner_text().strip()
                for sel in ("#job-status", "#objects-done", "#records", "#failed-objects", "#records-per-second")}
        assert text["#job-status"] == "Failed"
        assert text["#objects-done"] == f"{report['objects']} / {report['objects']}" == "41 / 41"
        assert text["#records"] == f"{report['records']:,}"
        assert text["#records-per-second"] == f"{report['records_per_second']:,.1f}"
        assert text["#failed-objects"] == str(report["failed"]) == "1"
        assert page.locator("#failures td.object").first.inner_text() == BAD_KEY
        assert page.locator("main img").count() == 0 and dialogs == [] and "1" != page.title()
        settings = page.locator("#settings").inner_text()
        lane = next(iter(report["batches"].values()))
        assert f"batch size\t{lane['max_batch_size']}\t{lane['chosen_by']['max_batch_size']}" in settings
        lasts = dict(page.eval_on_selector_all(
            "#chart-objects polyline", "ls => ls.map(l => [l.dataset.label, Number(l.dataset.last)])"))
        assert lasts["instance 0"] + lasts["instance 1"] == lasts["all"] == report["objects"]
