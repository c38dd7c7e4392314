"""A hop's handler calls taking turns on one thread (batching/cooperative.py).

The "model" here is a real DynamicBatcher on its own thread, or futures answered by another
thread once enough calls wait: the calls must all reach it from one thread, without waiting
for each other. Blocking is detected on clocks the test moves itself.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest

from tfbatch.batching import DynamicBatcher, cooperative
from tfbatch.batching.cooperative import STUCK_S, Turns, run_all


class FakeClocks:
    """A wall clock, a thread's CPU clock and the process's CPU clock the calls move by hand."""

    def __init__(self):
        self.wall = 0.0
        self.cpu = 0.0
        self.process = 0.0
        self.queued = 0.0

    def turns(self) -> Turns:
        return Turns(clock=lambda: self.wall, cpu_clock=lambda: self.cpu, process_clock=lambda: self.process,
                     queue_clock=lambda: self.queued)

    def spend(self, cpu: float, blocked: float = 0.0, others: float = 0.0, queued: float = 0.0) -> None:
        """A turn: ``cpu`` on the CPU, ``blocked`` off it, while other threads ran ``others``,
        ``queued`` of it waiting for a core."""
        self.cpu += cpu
        self.process += cpu + others
        self.wall += cpu + blocked
        self.queued += queued


class Answerer:
    """Answers every waiting future at once, from its own thread, when ``count`` wait."""

    def __init__(self, count: int):
        self.count, self.futures, self.lock = count, [], threading.Lock()
        self.rounds = 0

    def ask(self, value: int) -> Future:
        future: Future = Future()
        with self.lock:
            self.futures.append((future, value))
            if len(self.futures) < self.count:
                return future
            batch, self.futures = self.futures, []
            self.rounds += 1
        threading.Thread(target=lambda: [f.set_result(v * 10) for f, v in batch]).start()
        return future


def test_every_call_reaches_the_model_before_any_answer_and_results_keep_their_order():
    model = Answerer(count=4)
    threads = set()

    def call(item):
        threads.add(threading.get_ident())
        return cooperative.wait(model.ask(item)) + 1

    # With one call at a time, the first would wait forever for three others.
    assert run_all(call, [1, 2, 3, 4, 5, 6, 7, 8], limit=4, turns=Turns()) == [11, 21, 31, 41, 51, 61, 71, 81]
    assert threads == {threading.get_ident()}
    assert model.rounds == 2


def test_a_real_batcher_sees_the_calls_of_a_hop_together():
    sizes = []

    def run_batch(inputs):
        sizes.append(len(inputs["x"]))
        return {"y": inputs["x"] * 2}

    # A deadline long enough that only a full batch runs it: 8 calls must all be waiting.
    with DynamicBatcher(run_batch, max_batch_size=8, timeout_s=3600) as batcher:
        def call(item):
            out = cooperative.wait(batcher.submit({"x": np.array([item], dtype=np.int64)}))
            return int(out["y"][0])

        assert run_all(call, list(range(16)), limit=8, turns=Turns()) == [2 * n for n in range(16)]
    assert sizes == [8, 8]


def test_no_more_than_limit_calls_are_under_way():
    model = Answerer(count=3)
    under_way = peak = 0

    def call(item):
        nonlocal under_way, peak
        under_way += 1
        peak = max(peak, under_way)
        try:
            return cooperative.wait(model.ask(item))
        finally:
            under_way -= 1

    assert run_all(call, list(range(9)), limit=3, turns=Turns()) == [n * 10 for n in range(9)]
    assert peak == 3


def test_wait_outside_a_call_or_on_another_thread_just_waits():
    done: Future = Future()
    done.set_result(7)
    assert cooperative.wait(done) == 7  # no loop on this thread
    assert not cooperative.inside()

    seen = []

    def call(item):
        # a thread of the call's own: not one of the loop's calls, so it blocks as usual
        pending: Future = Future()
        helper = threading.Thread(target=lambda: seen.append((cooperative.inside(), cooperative.wait(pending))))
        helper.start()
        pending.set_result(item)
        helper.join()
        return cooperative.inside()

    assert run_all(call, [1, 2], limit=2, turns=Turns()) == [True, True]
    assert sorted(seen) == [(False, 1), (False, 2)]


def test_an_error_a_call_lets_through_ends_the_hop_and_drops_the_calls_under_way():
    model = Answerer(count=99)  # never answers: every call but the failing one stays paused
    ended = []

    def call(item):
        if item == 2:
            raise KeyError("boom")
        try:
            return cooperative.wait(model.ask(item))
        except BaseException as exc:
            ended.append(type(exc).__name__)
            raise

    with pytest.raises(KeyError, match="boom"):
        run_all(call, [0, 1, 2, 3], limit=4, turns=Turns())
    assert ended == ["GreenletExit", "GreenletExit"]
    assert not cooperative.inside()
    run_all(lambda item: item, [1], limit=1, turns=Turns())  # the thread can loop again


def test_calls_blocked_outside_the_model_stop_the_turns_and_the_rest_is_left_to_the_caller():
    clocks = FakeClocks()
    turns = clocks.turns()

    def call(item):
        clocks.spend(cpu=0.001, blocked=0.03)  # a 30 ms socket read to another service, say
        return item

    done = run_all(call, list(range(20)), limit=4, turns=turns)
    # 4 calls: 0.12 s off the CPU, more than 0.1 s and 8 times the 4 ms on it
    assert done == [0, 1, 2, 3]
    assert turns.blocking() and turns.calls == 4
    assert turns.off_cpu_s == pytest.approx(0.12) and turns.idle_s == pytest.approx(0.12)
    # for good: a later hop is told so before it starts
    assert run_all(call, [5, 6], limit=4, turns=turns) == [5]
    assert turns.blocking()


def test_calls_that_lose_the_cpu_now_and_then_keep_their_turns():
    clocks = FakeClocks()
    turns = clocks.turns()

    model = Answerer(count=8)

    def call(item):
        clocks.spend(cpu=0.001, blocked=0.002)  # the GIL taken by other threads for a while
        return cooperative.wait(model.ask(item))

    assert run_all(call, list(range(200)), limit=8, turns=turns) == [n * 10 for n in range(200)]
    assert not turns.blocking() and 2 * turns.paused_calls > turns.calls == 200  # the last of a batch may find it answered
    assert turns.cpu_s == pytest.approx(0.2) and turns.off_cpu_s == pytest.approx(0.4)


@pytest.mark.parametrize("explained", [
    # another thread of the process ran all that time: the GIL (a model warming up, a busy start-up)
    {"others": 0.03},
    # a loaded machine's other processes held the cores (the thread was runnable all along)
    {"queued": 0.03},
], ids=["other-threads-ran", "waiting-for-a-core"])
def test_calls_whose_waits_are_explained_keep_their_turns(explained):
    clocks = FakeClocks()
    turns = clocks.turns()
    model = Answerer(count=8)

    def call(item):
        clocks.spend(cpu=0.001, blocked=0.03, **explained)  # 30 ms off the CPU, as long as the blocked calls above
        return cooperative.wait(model.ask(item))

    assert run_all(call, list(range(64)), limit=8, turns=turns) == [n * 10 for n in range(64)]
    assert not turns.blocking()
    assert turns.off_cpu_s == pytest.approx(64 * 0.03) and turns.idle_s == pytest.approx(0)


def test_the_run_queue_wait_of_this_thread_is_read_where_linux_tells_it():
    import os

    from tfbatch.batching.cooperative import run_queue_wait

    path = "/proc/thread-self/schedstat"
    if not os.path.exists(path):
        assert run_queue_wait() == 0.0  # not known here: nothing is taken off
        return
    with open(path) as stats:
        waited_ns = int(stats.read().split()[1])  # run time, run-queue wait, timeslices
    assert waited_ns / 1e9 <= run_queue_wait()  # the same counter, read later


def test_only_the_time_no_other_thread_ran_counts_as_blocked():
    clocks = FakeClocks()
    turns = clocks.turns()

    def call(item):
        clocks.spend(cpu=0.001, blocked=0.03, others=0.01)  # 20 ms of each wait unexplained
        return item

    done = run_all(call, list(range(20)), limit=4, turns=turns)
    # 6 calls: 0.12 s idle, more than 0.1 s and 8 times the 6 ms on the CPU
    assert done == list(range(6)) and turns.blocking()
    assert turns.idle_s == pytest.approx(0.12)


class _WhenAwaited(list):
    """A future's waiter list that calls ``on_wait`` once something waits on the future:
    ``concurrent.futures.wait`` installs its waiter there, under the future's lock."""

    def __init__(self, on_wait):
        super().__init__()
        self.on_wait = on_wait

    def append(self, waiter):
        super().append(waiter)
        self.on_wait()


def test_time_waiting_for_the_model_is_not_time_off_the_cpu():
    clocks = FakeClocks()
    turns = clocks.turns()
    batch: list[tuple[Future, int]] = []

    def answer():  # the model: 0.5 s of wall time a batch, answered once the loop waits for it
        clocks.wall += 0.5
        done, batch[:] = list(batch), []
        threading.Thread(target=lambda: [f.set_result(v * 10) for f, v in done]).start()

    def ask(value: int) -> Future:
        future: Future = Future()
        if not batch:
            future._waiters = _WhenAwaited(answer)  # the first of a batch: the loop waits on it
        batch.append((future, value))
        return future

    def call(item):
        clocks.spend(cpu=0.001)
        return cooperative.wait(ask(item))

    assert run_all(call, list(range(16)), limit=4, turns=turns) == [n * 10 for n in range(16)]
    assert not turns.blocking()
    assert turns.off_cpu_s == pytest.approx(0) and turns.idle_s == pytest.approx(0)
    assert clocks.wall == pytest.approx(16 * 0.001 + 4 * 0.5)


def test_calls_that_never_pause_for_the_model_go_back_to_threads():
    # e.g. urllib to the job's own endpoint: another thread runs the model call, and each
    # call here only waits for its answer in turn
    from tfbatch.batching.cooperative import PAUSE_CHECK_CALLS

    clocks = FakeClocks()
    turns = clocks.turns()

    def call(item):
        clocks.spend(cpu=0.001, blocked=0.003, others=0.003)
        return item

    done = run_all(call, list(range(100)), limit=8, turns=turns)
    assert done == list(range(PAUSE_CHECK_CALLS))
    assert turns.blocking() and turns.why == "did not pause for the model" and turns.paused_calls == 0


def test_a_turn_under_way_for_long_stops_the_turns_of_other_threads():
    clocks = FakeClocks()
    turns = clocks.turns()
    inside, release = threading.Event(), threading.Event()

    def stuck(item):
        inside.set()
        release.wait()  # e.g. a lock another call of this thread holds across its model call
        return item

    hop = threading.Thread(target=lambda: run_all(stuck, [1], limit=1, turns=turns))
    hop.start()
    assert inside.wait(30)
    assert not turns.blocking()
    clocks.wall += STUCK_S + 0.01
    assert turns.blocking()  # a second hop, on another thread, would take threads now
    release.set()
    hop.join()
    assert turns.blocking()


# ``gathered``: a hop's calls hand their payloads to the loop, which flushes each key's once
# every call under way has paused, and resumes each call with its own item (or the error).

class Flusher:
    """A flush that answers from its own thread: each payload times ten, or an error."""

    def __init__(self, fail_on: int | None = None, raise_on: int | None = None):
        self.flushes: list[list[int]] = []
        self.fail_on, self.raise_on = fail_on, raise_on

    def __call__(self, payloads: list[int]) -> Future:
        self.flushes.append(list(payloads))
        if self.raise_on in payloads:
            raise ValueError(f"flush refused {self.raise_on}")
        future: Future = Future()

        def answer():
            if self.fail_on in payloads:
                future.set_exception(RuntimeError(f"batch with {self.fail_on} failed"))
            else:
                future.set_result([p * 10 for p in payloads])

        threading.Thread(target=answer).start()
        return future


def test_gathered_calls_of_a_hop_reach_their_flush_together_and_get_their_own_answers():
    flush = Flusher()

    def call(item):
        return cooperative.gathered("model", item, flush) + 1

    assert run_all(call, list(range(10)), limit=4, turns=Turns()) == [n * 10 + 1 for n in range(10)]
    assert flush.flushes == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_gathered_keys_flush_apart_and_waits_mix_with_them():
    by_key = {"a": Flusher(), "b": Flusher()}
    model = Answerer(count=1)

    def call(item):
        if item % 3 == 2:
            return cooperative.wait(model.ask(item))
        key = "a" if item % 3 == 0 else "b"
        return cooperative.gathered(key, item, by_key[key])

    assert run_all(call, list(range(9)), limit=9, turns=Turns()) == [n * 10 for n in range(9)]
    assert by_key["a"].flushes == [[0, 3, 6]] and by_key["b"].flushes == [[1, 4, 7]]


def _answers_or_errors(flush_for, items: list[int], limit: int) -> list:
    """run_all of calls that each gather their item under one key (with ``flush_for(item)``,
    the key's flush where the call is the first of its round), an error's words as its answer."""
    def call(item):
        try:
            return cooperative.gathered("k", item, flush_for(item))
        except (RuntimeError, ValueError) as exc:
            return str(exc)

    return run_all(call, items, limit=limit, turns=Turns())


def test_a_failed_or_refused_flush_is_each_gathered_calls_error_and_the_hop_goes_on():
    failing, refusing = Flusher(fail_on=2), Flusher(raise_on=5)
    # items 0-3 share the failing flush's batch; 4-7, the next round, the refusing one
    got = _answers_or_errors(lambda item: failing if item < 4 else refusing, list(range(8)), limit=4)
    assert got == ["batch with 2 failed"] * 4 + ["flush refused 5"] * 4
    assert failing.flushes == [[0, 1, 2, 3]] and refusing.flushes == [[4, 5, 6, 7]]


def test_a_flush_that_raises_resumes_its_calls_with_the_error():
    refusing = Flusher(raise_on=1)
    assert _answers_or_errors(lambda item: refusing, [0, 1, 2], limit=3) == ["flush refused 1"] * 3


def test_gathered_outside_a_call_flushes_its_payload_alone():
    flush = Flusher()
    assert cooperative.gathered("k", 7, flush) == 70
    assert flush.flushes == [[7]]


def test_a_real_batcher_gets_one_request_for_a_hops_gathered_model_calls():
    # ModelServer.run_signature in a hop's call: cooperative.gathered with the batcher's
    # group key; the batcher sees one request of the hop's rows, each call its own rows back
    from tfbatch.batching.batcher import check_request, group_key
    from tfbatch.runtime.model_server import _submit_together

    sizes = []

    def run_batch(inputs):
        sizes.append(len(inputs["x"]))
        return {"y": inputs["x"] * 2}

    # Run at once when idle: calls submitted one by one would see the first run alone.
    with DynamicBatcher(run_batch, max_batch_size=64, timeout_s=3600, idle_dispatch=True) as batcher:
        def call(item):
            arrays, _ = check_request({"x": np.arange(item % 3 + 1, dtype=np.int64) + 100 * item}, batcher.name)
            out = cooperative.gathered((batcher, group_key(arrays)), arrays,
                                       lambda gathered: _submit_together(batcher, None, "s", gathered))
            return out["y"].tolist()

        got = run_all(call, list(range(8)), limit=8, turns=Turns())
    assert got == [[2 * (100 * n + k) for k in range(n % 3 + 1)] for n in range(8)]
    assert sizes == [sum(n % 3 + 1 for n in range(8))]


def test_a_flush_that_answers_too_few_calls_fails_them_all_instead_of_leaving_one_waiting():
    def short(payloads):
        future: Future = Future()
        future.set_result([p * 10 for p in payloads[:-1]])
        return future

    assert _answers_or_errors(lambda item: short, [1, 2, 3], limit=3) == \
        ["a flush of 3 gathered calls gave 2 results"] * 3
