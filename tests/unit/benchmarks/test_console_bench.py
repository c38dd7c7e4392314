"""The console benchmark's harness runs small and reports what its README quotes."""

from __future__ import annotations

import json

import pytest

from benchmarks.console import bench


def test_console_bench_reports_callback_cost_and_bounded_pages(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["--objects", "3000", "--jobs", "60", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == data
    cb, pages = data["callback"], data["pages"]
    assert cb["objects"] == 3000 and cb["recording_us"] > 0 and cb["progress_us"] > 0
    assert cb["extra_s_for_10m_objects"] == pytest.approx(cb["extra_us_per_object"] * 10)
    assert pages["jobs"] == 61 and 0 < pages["series_points"] <= 4 * 513
    assert pages["job_page_bytes"] > pages["live_fragment_bytes"] > 0
