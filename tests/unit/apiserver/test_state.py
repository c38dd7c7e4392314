"""The SQLite state: what handlers store survives reopening (as after a kill -9), names ignore case."""

from __future__ import annotations

import pytest

from tfbatch.apiserver.state import State


def test_resources_round_trip_and_survive_reopening(tmp_path):
    state = State(tmp_path)
    assert state.insert("model", "My-Model", "arn:m", {"ModelName": "My-Model", "n": 1}, created=2.0)
    assert not state.insert("model", "my-model", "arn:m2", {"ModelName": "my-model"})  # SageMaker: case-blind
    assert state.insert("model", "older", "arn:o", {"ModelName": "older"}, created=1.0)
    assert state.update("model", "MY-MODEL", n=2, gone=None) == {"ModelName": "My-Model", "n": 2}
    assert state.update("model", "missing", n=1) is None
    state.set_tags("arn:m", {"a": "1", "b": "2"})
    state.put_progress("job", {"objects": 3})
    state.close()

    again = State(tmp_path)
    assert [d["ModelName"] for d in again.list("model")] == ["older", "My-Model"]
    assert again.get("model", "my-model")["n"] == 2
    assert again.kind_of_arn("arn:m") == ("model", "My-Model")
    assert again.tags("arn:m") == {"a": "1", "b": "2"}
    again.delete_tags("arn:m", ["a"])
    assert again.tags("arn:m") == {"b": "2"}
    assert again.progress("job") == {"objects": 3}
    assert again.delete("model", "older") and not again.delete("model", "older")
    again.close()


def test_a_failed_transaction_leaves_nothing(tmp_path):
    state = State(tmp_path)
    with pytest.raises(RuntimeError):
        with state.transaction():
            state.set_tags("arn:x", {"k": "v"})
            raise RuntimeError("between two writes")
    assert state.tags("arn:x") == {}
    state.close()


def test_log_streams_and_events_in_write_order(tmp_path):
    state = State(tmp_path)
    state.put_log_events("/g", "job/a", [(10, "one"), (20, "two")])
    state.put_log_events("/g", "job/b", [(15, "other")])
    state.put_log_events("/g", "job/a", [(30, "three")])
    streams = state.log_streams("/g", "job/")
    assert [s["stream"] for s in streams] == ["job/a", "job/b"]
    assert streams[0]["first_ts"] == 10 and streams[0]["last_ts"] == 30
    assert [r[4] for r in state.log_events("/g", ["job/a"])] == ["one", "two", "three"]
    assert [r[4] for r in state.log_events("/g", None, start_ms=15, end_ms=20)] == ["two", "other"]
    first = state.log_events("/g", ["job/a"], limit=1)[0][0]
    assert [r[4] for r in state.log_events("/g", ["job/a"], after_id=first)] == ["two", "three"]
    assert state.log_groups() == ["/g"]
    state.close()
