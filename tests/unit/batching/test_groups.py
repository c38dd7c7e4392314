"""How finely a failed batch's requests are cut (batching/groups.py): halves while bad rows are
rare in the job, about n * sqrt(p) parts where a request has a bad row with chance p."""

import pytest

from tfbatch.batching.groups import BadRows


def _bad_rows(rows_seen: int, failed_alone: int) -> BadRows:
    counts = BadRows()
    counts.seen(rows_seen)
    counts.failed_alone(failed_alone)
    return counts


def _sizes(parts) -> list[int]:
    return [len(part) for part in parts]


def test_halves_until_bad_rows_are_seen():
    parts = BadRows().parts(list(range(64)))
    assert _sizes(parts) == [32, 32]
    assert [x for part in parts for x in part] == list(range(64))  # in order, each once


@pytest.mark.parametrize("seen, bad, want", [
    (10_000, 10, 2),      # 0.1 % bad: 64 * 0.032 = 2 parts, halves
    (10_000, 100, 6),     # 1 %: 64 * 0.1 = 6.4
    (10_000, 1_000, 20),  # 10 %: 64 * 0.316 = 20.2, parts of 3 or 4
])
def test_parts_grow_with_the_share_of_bad_rows(seen, bad, want):
    parts = _bad_rows(seen, bad).parts(list(range(64)))
    assert len(parts) == want
    assert max(_sizes(parts)) - min(_sizes(parts)) <= 1
    assert [x for part in parts for x in part] == list(range(64))


def test_requests_of_many_rows_are_cut_finer():
    # 1 % of rows bad: a request of 45 rows holds one with chance 36 %, so 4 such requests go
    # in 2 parts, and 16 in 10.
    counts = _bad_rows(10_000, 100)
    assert len(counts.parts(list(range(4)), rows_each=45)) == 2
    assert len(counts.parts(list(range(16)), rows_each=45)) == 10
    # Bad rows everywhere (a request of 100 rows all but surely holds one): each alone.
    assert _sizes(_bad_rows(100, 50).parts(list(range(8)), rows_each=100)) == [1] * 8


def test_search_answers_each_item_in_order_and_leaves_only_bad_ones_alone():
    bad = {3, 9, 10}
    calls: list[list[int]] = []

    def joint(part):
        calls.append(list(part))
        return None if bad & set(part) else [f"joint {x}" for x in part]

    got = BadRows().search(list(range(16)), joint, lambda x: f"alone {x}")
    assert [int(answer.split()[1]) for answer in got] == list(range(16))
    alone = {int(answer.split()[1]) for answer in got if answer.startswith("alone")}
    # The bad items, and at most their neighbours in a part of two or fewer, run alone.
    assert bad <= alone and len(alone) <= 2 * len(bad)
    assert all(len(part) > 1 for part in calls)  # a part of one item is not called jointly
