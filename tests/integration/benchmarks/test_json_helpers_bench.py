"""The JSON helpers benchmark runs end to end on a small answer (its own check: every count
writes the bytes of one encode)."""

from __future__ import annotations

from benchmarks.latency import json_helpers


def test_the_benchmark_compares_helper_counts(capsys):
    assert json_helpers.main(["--helpers", "0", "1", "--rounds", "2", "--values", "400000"]) == 0
    out = capsys.readouterr().out
    assert "0 helper(s):" in out and "1 helper(s):" in out and "x of 0" in out
