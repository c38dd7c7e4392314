"""How finely PooledService cuts a failed joint call's requests: halves while bad rows are
rare in the job, about n * sqrt(p) parts where a request has a bad row with chance p."""

import numpy as np
import pytest

from tfbatch.handlers.pooled import PooledService


def _service(rows_seen: int, failed_alone: int) -> PooledService:
    # The cut reads only the job's counts and the requests' rows: no model, no workers.
    service = PooledService(None, None)  # type: ignore[arg-type]
    service.rows_seen, service.requests_failed_alone = rows_seen, failed_alone
    return service


def _requests(n: int, rows: int = 1) -> list[dict]:
    return [{"x": np.full((rows, 3), i, np.float32)} for i in range(n)]


def _sizes(parts: list[list[dict]]) -> list[int]:
    return [len(part) for part in parts]


def test_halves_until_bad_rows_are_seen():
    requests = _requests(64)
    parts = _service(0, 0)._cuts(requests)
    assert _sizes(parts) == [32, 32]
    assert [r["x"][0, 0] for part in parts for r in part] == list(range(64))  # in order, each once


@pytest.mark.parametrize("seen, bad, want", [
    (10_000, 10, 2),      # 0.1 % bad: 64 * 0.032 = 2 parts, halves
    (10_000, 100, 6),     # 1 %: 64 * 0.1 = 6.4
    (10_000, 1_000, 20),  # 10 %: 64 * 0.316 = 20.2, parts of 3 or 4
])
def test_parts_grow_with_the_share_of_bad_rows(seen, bad, want):
    parts = _service(seen, bad)._cuts(_requests(64))
    assert len(parts) == want
    assert max(_sizes(parts)) - min(_sizes(parts)) <= 1 and sum(_sizes(parts)) == 64


def test_requests_of_many_rows_are_cut_finer():
    # 1 % of rows bad: a request of 45 rows has one with chance 36 %, so 4 such requests run
    # in 2 parts, and 16 in 10.
    service = _service(10_000, 100)
    assert len(service._cuts(_requests(4, rows=45))) == 2
    assert len(service._cuts(_requests(16, rows=45))) == 10
    # Every request bad (its rows too many to pass): each alone.
    assert _sizes(_service(100, 50)._cuts(_requests(8, rows=100))) == [1] * 8
