"""Handler pool messages over a socket pair: one small pickle, the bulk bytes beside it.

A hop carries a batch of request bodies one way and their decoded images the other (about
2 MB for 16 photos). ``multiprocessing.connection`` pickles all of it in-band: the bytes are
copied into the pickle, read back in socket-sized pieces into a ``BytesIO``, copied out of
it, and copied again by unpickling, in both processes, under each process's GIL. Here a
message is a pickle (protocol 5) whose large byte strings travel *out of band*: the sender
hands them to one ``sendmsg`` straight from the objects that hold them, the receiver reads
the whole message with ``recv_into`` into one buffer, and each byte string is a slice of it
until its consumer copies it once.

Frame: ``!II`` (pickle length, buffer count), ``!Q`` per buffer (its length), the pickle,
the buffers. Both ends are our own processes; a short read is the peer's death (EOFError).

Large ``bytes`` reach the wire out of band when they are wrapped in ``pickle.PickleBuffer``
by the sender (the receiver then gets a ``memoryview``), or when they sit in a NumPy object
array (string tensors): those arrive as an object array of ``bytes`` again.
"""

from __future__ import annotations

import io
import pickle
import socket
import struct

import numpy as np

from tfbatch import sockio

_HEAD = struct.Struct("!II")
OUT_OF_BAND_MIN = 4096  # smaller strings cost less in the pickle than as a buffer of their own


def _strings(shape: tuple, parts: list, wrapped: list[int]) -> np.ndarray:
    out = np.empty(len(parts), dtype=object)
    for n, part in enumerate(parts):
        out[n] = part
    for n in wrapped:
        out[n] = bytes(parts[n])  # the one copy, out of the message buffer
    return out.reshape(shape)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if type(obj) is np.ndarray and obj.dtype == object:
            parts = obj.reshape(-1).tolist()
            wrapped = []
            for n, part in enumerate(parts):
                if type(part) is bytes and len(part) >= OUT_OF_BAND_MIN:
                    parts[n] = pickle.PickleBuffer(part)
                    wrapped.append(n)
            if wrapped:
                return _strings, (obj.shape, parts, wrapped)
        return NotImplemented


def send(sock: socket.socket, obj) -> None:
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(obj)
    raws = [b.raw() for b in buffers]
    head = _HEAD.pack(stream.tell(), len(raws)) + struct.pack(f"!{len(raws)}Q", *(r.nbytes for r in raws))
    sockio.send_all(sock, [head, stream.getbuffer(), *raws])


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    sockio.recv_into(sock, view, "handler pool peer closed the connection")


def recv(sock: socket.socket):
    head = bytearray(_HEAD.size)
    _recv_into(sock, memoryview(head))
    pickle_size, count = _HEAD.unpack(head)
    sizes: tuple[int, ...] = ()
    if count:
        raw = bytearray(8 * count)
        _recv_into(sock, memoryview(raw))
        sizes = struct.unpack(f"!{count}Q", raw)
    body = memoryview(bytearray(pickle_size + sum(sizes)))
    _recv_into(sock, body)
    buffers, at = [], pickle_size
    for size in sizes:
        buffers.append(body[at:at + size])
        at += size
    return pickle.loads(body[:pickle_size], buffers=buffers)
