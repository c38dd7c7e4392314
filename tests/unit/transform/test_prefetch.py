"""Prefetch: the listing on a thread of its own, ahead of the chunks (transform/lookahead.py)."""

from __future__ import annotations

import threading

import pytest

from tfbatch.transform.lookahead import CountAhead, Prefetch


def test_items_pass_in_order_each_once():
    items = list(range(5000))
    assert list(Prefetch(iter(items), limit=64, run=16)) == items
    assert list(Prefetch(iter([]))) == []


def test_the_first_item_is_not_held_for_a_run():
    """The consumer gets the first item while the source is still blocked on the second."""
    release = threading.Event()

    def source():
        yield "first"
        release.wait()
        yield "second"

    p = Prefetch(source(), run=256)
    assert next(p) == "first"  # would hang if the first run waited for 256 items
    release.set()
    assert list(p) == ["second"]


def test_a_source_error_comes_after_the_items_before_it():
    def source():
        yield 1
        yield 2
        raise OSError("listing failed: /data/in")

    p = Prefetch(source(), run=4)
    got = []
    with pytest.raises(OSError, match="listing failed"):
        for item in p:
            got.append(item)
    assert got == [1, 2]


def test_it_reads_at_most_about_limit_items_ahead():
    """A consumer that stops: the thread fills the queue and waits, it does not list on."""
    produced = []
    full = threading.Event()

    def source():
        for i in range(100_000):
            produced.append(i)
            if len(produced) > 200:
                full.set()  # never reached if the bound holds
            yield i

    p = Prefetch(source(), limit=64, run=8)
    assert next(p) == 0
    p.close()
    assert not p._thread.is_alive()
    # queue of 64 / 8 = 8 runs, the run being formed and the one put back: well under 200
    assert not full.is_set() and len(produced) < 200


def test_close_stops_the_thread_and_closes_the_source():
    closed = threading.Event()

    def source():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    p = Prefetch(source(), limit=16, run=4)
    assert [next(p) for _ in range(10)] == list(range(10))
    p.close()
    assert closed.is_set() and not p._thread.is_alive()
    with pytest.raises(StopIteration):
        next(p)


def test_count_ahead_over_a_prefetch_counts_on_the_consumers_thread():
    """CountAhead (the tuner's look-ahead) reads the prefetch; both run on one thread."""
    counted = CountAhead(Prefetch(iter(range(1000)), limit=32, run=8))
    assert counted.rows(100) == (100, False)
    assert next(counted) == 0
    assert counted.rows(5000) == (1000, True)
    assert list(counted) == list(range(1, 1000))


class _Sized:
    def __init__(self, size):
        self.size = size


def test_count_ahead_reads_ahead_by_bytes_and_estimates_rows():
    from tfbatch.transform.lookahead import rows_from_bytes

    counted = CountAhead([_Sized(1000)] * 50, limit=20)
    assert counted.bytes_ahead(2500) == (3000, False)  # three objects hold 2,500 bytes
    assert counted.seen == 3 and next(counted).size == 1000
    # 100 bytes a row: 40 rows want 4,000 bytes, four objects
    assert rows_from_bytes(counted, 100.0, 40) == (40, False)
    # the look-ahead holds at most 20 objects: 200 rows' worth is known, not more
    assert rows_from_bytes(counted, 100.0, 10_000) == (210, False) and len(counted._ahead) == 20
    assert rows_from_bytes(counted, None, 40) is None  # no request seen yet: cannot tell
    # fewer rows than asked and than the floor: the caller's fixed budget holds
    assert rows_from_bytes(counted, 100.0, 10_000, floor=1_000) is None
    assert rows_from_bytes(counted, 100.0, 10_000, floor=100) == (210, False)
    assert len(list(counted)) == 49
    assert rows_from_bytes(counted, 100.0, 10_000) == (500, True)  # all of it, exactly that many bytes


def test_rows_from_bytes_cannot_tell_without_listed_sizes():
    from tfbatch.transform.lookahead import rows_from_bytes

    counted = CountAhead([_Sized(1000), _Sized(None), _Sized(1000)])
    assert rows_from_bytes(counted, 100.0, 40) is None
    assert CountAhead(range(5)).bytes_ahead(10) == (None, False)


def test_count_ahead_is_read_ahead_from_another_thread_while_it_is_iterated():
    """The tuner asks how many rows the job has on a hop's thread while the driver iterates:
    a generator stepped from both at once would raise "generator already executing"."""
    import sys

    counted = CountAhead((n for n in range(100_000)), limit=1_000_000)
    failures = []

    def read_ahead():
        try:
            while not counted.exhausted:
                counted.rows(counted.seen + 3)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        reader = threading.Thread(target=read_ahead)
        reader.start()
        got = list(counted)
        reader.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
    assert got == list(range(100_000))
    assert counted.seen == 100_000
