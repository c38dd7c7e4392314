"""The endpoint side's in-process parts: variant routing, in-flight counts, the log buffer."""

from __future__ import annotations

import random
import threading

import pytest

from tfbatch.apiserver.endpoint_process import EndpointProcess
from tfbatch.apiserver.endpoint_workers import LogBuffer, Route, Variant


def _variant(name: str, weight: float, tmp_path) -> Variant:
    return Variant(name, weight, [EndpointProcess("unused", tmp_path, instance_id=f"i-{name}")])


def test_target_variant_wins_and_an_unknown_one_is_none(tmp_path):
    route = Route([_variant("a", 1.0, tmp_path), _variant("b", 1.0, tmp_path)])
    assert all(route.pick("b").name == "b" for _ in range(20))
    assert route.pick("nope") is None


def test_weights_split_traffic(tmp_path):
    random.seed(7)
    route = Route([_variant("a", 3.0, tmp_path), _variant("b", 1.0, tmp_path)])
    picks = [route.pick(None).name for _ in range(4000)]
    share = picks.count("a") / len(picks)
    assert 0.70 < share < 0.80  # 3:1 weights; seeded, so the same every run
    only_b = Route([_variant("a", 0.0, tmp_path), _variant("b", 1.0, tmp_path)])
    assert {only_b.pick(None).name for _ in range(200)} == {"b"}


def test_drain_waits_for_the_last_request(tmp_path):
    proc = EndpointProcess("unused", tmp_path)
    proc.acquire()
    proc.acquire()
    assert not proc.drain(timeout=0)
    released = threading.Event()

    def finish() -> None:
        proc.release()
        proc.release()
        released.set()

    threading.Thread(target=finish).start()
    assert proc.drain(timeout=30)
    assert released.is_set() and proc.inflight == 0


def test_an_unready_process_has_no_url(tmp_path):
    from tfbatch.errors import Unavailable

    with pytest.raises(Unavailable, match="not ready"):
        EndpointProcess("unused", tmp_path).url


class _State:
    def __init__(self) -> None:
        self.writes: list[tuple[str, str, list]] = []

    def put_log_events(self, group, stream, events) -> None:
        self.writes.append((group, stream, events))


def test_log_buffer_writes_each_stream_in_one_batch_in_order():
    state = _State()
    buffer = LogBuffer(state, interval_s=3600)  # only close() flushes here
    for i in range(5):
        buffer.add("/aws/sagemaker/Endpoints/e", "AllTraffic/i-1", f"line {i}")
    buffer.add("/aws/sagemaker/Endpoints/e", "AllTraffic/i-2", "other")
    buffer.close()
    by_stream = {stream: [m for _, m in events] for _, stream, events in state.writes}
    assert by_stream == {"AllTraffic/i-1": [f"line {i}" for i in range(5)], "AllTraffic/i-2": ["other"]}
