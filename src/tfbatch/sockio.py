"""Whole messages over stream sockets between our own processes: many buffers in few
``sendmsg`` calls, exact reads into a caller's buffer. Used by the handler pool's wire
(handlers/wire.py) and the endpoint's JSON helper processes (tfs/json_helpers.py)."""

from __future__ import annotations

import itertools
import socket
from collections import deque

IOV_MAX = 512  # buffers per sendmsg call, under every platform's IOV_MAX


def send_views(sock: socket.socket, views: deque[memoryview], *, wait: bool = True) -> None:
    """Send ``views`` (non-empty, byte-format) from the left, removing what went out. With
    ``wait`` False, stop where the socket would block (``MSG_DONTWAIT``) and leave the rest in
    ``views``; with ``wait`` a timeout of the socket's raises BlockingIOError as usual."""
    flags = 0 if wait else socket.MSG_DONTWAIT
    while views:
        try:
            sent = sock.sendmsg(list(itertools.islice(views, IOV_MAX)), [], flags)
        except BlockingIOError:
            if wait:
                raise
            return
        while sent:
            head = views[0]
            if sent >= head.nbytes:
                sent -= head.nbytes
                views.popleft()
            else:
                views[0] = head[sent:]
                sent = 0


def views_of(buffers) -> deque[memoryview]:
    """The non-empty ones among ``buffers`` (bytes, memoryviews, C-contiguous arrays) as byte views."""
    return deque(v for v in (memoryview(b).cast("B") for b in buffers) if v.nbytes)


def send_all(sock: socket.socket, buffers) -> None:
    send_views(sock, views_of(buffers))


def recv_into(sock: socket.socket, view: memoryview, eof_message: str = "peer closed mid-message") -> None:
    """Fill ``view`` from ``sock``; EOFError(``eof_message``) if the peer closes first."""
    got = 0
    while got < view.nbytes:
        n = sock.recv_into(view[got:])
        if not n:
            raise EOFError(eof_message)
        got += n
