"""The transform bench's repeated rounds: median ratios and the table's round labels."""

from __future__ import annotations

from benchmarks.common.report import markdown
from benchmarks.transform.bench import median_ratios


def _round(ab: float | None, ac: float) -> dict:
    return {"a/b": {"steady": ab, "end_to_end": 1.0}, "a/c": {"steady": ac, "end_to_end": 2.0}}


def test_median_of_each_ratio_over_rounds_skips_unmeasured():
    rounds = [_round(0.8, 2.0), _round(None, 1.5), _round(1.0, 2.5), _round(0.9, 1.0)]
    got = median_ratios(rounds)
    assert got["a/b"]["steady"] == 0.9  # the round that measured nothing is left out
    assert got["a/c"]["steady"] == 1.75
    assert got["a/b"]["end_to_end"] == 1.0


def test_one_round_gives_that_rounds_ratios():
    assert median_ratios([_round(0.7, 3.0)]) == _round(0.7, 3.0)


def _run(contender: str, round_no: int) -> dict:
    return {"contender": contender, "ok": True, "steady_images_per_s": 100.0, "end_to_end_images_per_s": 50.0,
            "startup_s": 1.0, "shutdown_s": 0.1, "wall_s": 5.0, "peak_rss_mb": 100.0,
            "extra": {"round": round_no, "steady_cpu_ms_per_image": 3.0, "cpu_ms_per_image": 5.0}}


def test_table_labels_rounds_and_lists_each_rounds_ratio():
    rounds = [_round(0.8, 2.0), _round(1.0, 2.2), _round(0.9, 2.1)]
    results = {
        "command": "bench", "started": "now", "note": "", "settings": {},
        "machine": {"cpus": 2}, "load_average_before": [0, 0, 0], "load_average_after": [0, 0, 0],
        "dataset": {"count": 3, "bytes_min": 2048, "bytes_max": 4096, "bytes_median": 3072, "sources": ["x"]},
        "models": {"tiny": {"runs": [_run(c, r) for r in range(3) for c in "ab"],
                            "ratios": median_ratios(rounds), "rounds": rounds, "targets": {}}},
    }
    md = markdown(results)
    assert "| (a) tfbatch transform (CLI), round 3 |" in md
    assert "- a/b (median of 3 rounds): 0.90× steady" in md
    assert "steady, round by round: 0.80×, 1.00×, 0.90×" in md
