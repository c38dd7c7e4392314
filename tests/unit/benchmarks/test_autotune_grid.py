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


def test_each_auto_run_gets_a_row_of_its_phases():
    from benchmarks.transform.autotune_grid import breakdown_lines

    phases = {"probe": {"rows": 96, "seconds": 1.0, "cpu_seconds": 0.5, "cost_seconds": 0.1},
              "recheck": {"rows": 0, "seconds": 0.0, "cpu_seconds": 0.0, "cost_seconds": 0.0},
              "chosen": {"rows": 1900, "seconds": 9.0, "cpu_seconds": 4.0}}
    runs = [{"lane": {"autotune": {"chosen": 16, "phases": phases, "ms_per_row": {"16": 1.0},
                                   "measure": "wall ms per row"}}},
            {"lane": {}}]  # a run whose report was missing: no row
    rows = [line for line in breakdown_lines(runs) if line.startswith("| 1 ")]
    assert rows == ["| 1 | 16 | 96 / 1.00 / 0.1 | 0 / 0.00 / 0.0 | 1900 / 9.00 | 1 % | {'16': 1.0} (wall ms per row) |"]
    assert not [line for line in breakdown_lines(runs) if line.startswith("| 2 ")]
