"""handlers/wire.py: pool messages over a real socket pair, bulk bytes out of band."""

from __future__ import annotations

import os
import pickle
import socket
import threading

import numpy as np
import pytest

from tfbatch.handlers import wire


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _through(pair, obj):
    """Send from one end while a thread receives at the other (large messages fill the socket buffer)."""
    a, b = pair
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("value", wire.recv(b)))
    reader.start()
    wire.send(a, obj)
    reader.join(60)
    assert not reader.is_alive()
    return got["value"]


def test_string_tensors_arrive_as_object_arrays_of_the_same_bytes(pair):
    big = [os.urandom(300_000 + n) for n in range(5)]
    strings = np.empty((5, 1), dtype=object)
    for n, b in enumerate(big):
        strings[n, 0] = b
    mixed = np.array([b"tiny", "text", 7, None, bytearray(b"x" * 10_000)], dtype=object)
    floats = np.arange(12, dtype=np.float32).reshape(3, 4)
    message = [("tensors", {"image_bytes": strings, "mixed": mixed, "f": floats}, "row", 1, "serving_default")]
    (result,) = _through(pair, message)
    assert result[0] == "tensors" and result[2:] == ("row", 1, "serving_default")
    out = result[1]
    assert out["image_bytes"].dtype == object and out["image_bytes"].shape == (5, 1)
    assert [type(v) for v in out["image_bytes"].flat] == [bytes] * 5
    assert list(out["image_bytes"].flat) == big
    # Small strings and other objects keep their type; only large bytes take the buffer route.
    assert [type(v) for v in out["mixed"]] == [bytes, str, int, type(None), bytearray]
    assert list(out["mixed"]) == list(mixed)
    np.testing.assert_array_equal(out["f"], floats)


def test_pickle_buffers_arrive_as_views_of_the_same_bytes(pair):
    bodies = [os.urandom(n) for n in (0, 1, 4095, 4096, 2_000_000)]
    got = _through(pair, [(pickle.PickleBuffer(b), "image/jpeg", n) for n, b in enumerate(bodies)])
    assert [bytes(view) for view, _, _ in got] == bodies
    assert [n for _, _, n in got] == list(range(5))


def test_more_buffers_than_one_sendmsg_takes(pair):
    many = [os.urandom(5000) for _ in range(1300)]  # over the 512 buffers a call sends
    got = _through(pair, [pickle.PickleBuffer(b) for b in many])
    assert [bytes(v) for v in got] == many


def test_messages_follow_each_other_on_one_socket(pair):
    for obj in (None, ("init", {"k": 1}), [("input", [1, 2])], "x" * 100_000):
        assert _through(pair, obj) == obj


def test_a_peer_that_closes_is_end_of_file_even_mid_message(pair):
    a, b = pair
    a.sendall(wire._HEAD.pack(1000, 0) + b"partial")
    a.close()
    with pytest.raises(EOFError):
        wire.recv(b)
