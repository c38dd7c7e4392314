"""The grid harness's run order: every grid point once per round, auto runs spread between them."""

from __future__ import annotations

from benchmarks.transform.autotune_grid import schedule


def test_every_point_runs_once_per_round_with_auto_between():
    points = [f"b{b}" for b in (4, 8, 16, 32, 64)]
    order = schedule(points, rounds=2, auto_every=2, seed=1)
    grid = [p for p in order if p != "auto"]
    assert sorted(grid) == sorted(points * 2)
    assert order[0] == "auto" and order[-1] == "auto"
    # Never more than auto_every grid points in a row, so a load change reaches auto too.
    run = 0
    for name in order:
        run = 0 if name == "auto" else run + 1
        assert run <= 2
    # Shuffled per round, deterministically for a seed.
    assert schedule(points, rounds=2, auto_every=2, seed=1) == order
