"""Helper processes that write parts of a large array's JSON text while this process writes the rest.

orjson writes floats in C but holds the GIL throughout: 27 MB of float32 text (a 10.5 MB
output) takes one core 80-130 ms, longer than the gRPC answer's whole call, and threads
cannot share that work. Processes can. The pieces of the answer's large arrays
(:mod:`tfbatch.tfs.jsonpieces`) are dealt out in the order they are sent, each to the writer
(this process or a borrowed helper) with the fewest values so far. Each helper gets the
values of all its pieces at the start (one ``sendmsg``) and writes them all without
waiting, sending each text as far as the socket takes it at once;
the stream reads the texts back in order when it reaches them. So every writer works near
the part of the answer that is sent next, and a helper holds at most its own share of the
answer's text. The bytes are those of one ``orjson.dumps``.

Helpers are borrowed, never waited for: a response takes the helpers that are idle and
writes the rest itself. They are plain children (``python -m tfbatch.tfs.json_helpers FD``,
importing NumPy and orjson only, never a fork of a TensorFlow process), started by
:meth:`JsonHelpers.start` (``tfbatch serve`` does so while the model loads) or else the first
time a response is large enough to use them, in the background: no request waits for a start.
A helper that dies, stalls past ``timeout_s`` or answers with an error is dropped and this
process writes its remaining pieces; a later response starts a replacement. A stream that is
abandoned (the client went away) gives its helpers back owing texts; their next borrower reads
and discards those first.

Wire, both ends our own: a job is ``!IQ`` (meta length, data length), the meta (orjson: per
piece its dtype, byte offset into the data, shape, inner flag, head and tail), the values.
Each answer is ``!Q`` length and the text; a length of ``ERROR`` is followed by ``!Q`` and a
message, and ends the job.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np
import orjson

from tfbatch import sockio
from tfbatch.tfs import jsonpieces
from tfbatch.tfs.jsonpieces import Piece

log = logging.getLogger(__name__)

_REQUEST = struct.Struct("!IQ")
_LENGTH = struct.Struct("!Q")
ERROR = (1 << 64) - 1
READY = b"R"
_ALIGN = 16
# A helper's share below this is not worth a hop (~1.3 MB of float32 text, a few ms of orjson).
MIN_SHARE_VALUES = 1 << 17
MAX_FAILED_STARTS = 3  # in a row: helpers cannot start here, stop trying


def auto_size(workers: int = 1, cpus: int | None = None) -> int:
    """Helpers per server process: the cores one worker process has beyond its own, at most 3."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(3, cpus // max(1, workers) - 1))


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = sock.recv(size, socket.MSG_WAITALL) if size else b""
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:  # a signal, a timeout slice or a peer's death cut the read short
        more = sock.recv(size - got)
        if not more:
            raise EOFError(f"peer closed after {got} of {size} bytes")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class _Helper:
    """One helper process and this side of its socket."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket):
        self.proc = proc
        self.sock = sock
        self.owed = 0  # texts of the current job not yet read

    def submit(self, group: Sequence[tuple[np.ndarray, Piece]]) -> None:
        """Send the values of ``group`` (pieces with values, in order) and what to write of them."""
        buffers: list = []
        meta_pieces = []
        offset = 0
        for flat, p in group:
            run = flat[p.start:p.start + p.size]
            pad = -offset % _ALIGN  # each run starts aligned for its dtype in the helper's buffer
            if pad:
                buffers.append(bytes(pad))
                offset += pad
            buffers.append(run)
            meta_pieces.append([flat.dtype.str, offset, p.shape, p.inner, p.head.decode(), p.tail.decode()])
            offset += run.nbytes
        meta = orjson.dumps(meta_pieces)
        self.owed = len(group)
        sockio.send_all(self.sock, [_REQUEST.pack(len(meta), offset), meta, *buffers])

    def next_text(self) -> bytes:
        size = _LENGTH.unpack(_recv_exact(self.sock, _LENGTH.size))[0]
        if size == ERROR:
            size = _LENGTH.unpack(_recv_exact(self.sock, _LENGTH.size))[0]
            self.owed = 0
            raise RuntimeError(_recv_exact(self.sock, size).decode("utf-8", "replace"))
        text = _recv_exact(self.sock, size)
        self.owed -= 1
        return text

    def close(self) -> None:
        try:
            self.sock.close()  # EOF: the helper exits
        finally:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class JsonHelpers:
    """Up to ``size`` helper processes, lent to one response at a time."""

    def __init__(self, size: int, *, timeout_s: float = 30.0, min_share_values: int = MIN_SHARE_VALUES):
        self.size = size
        self.timeout_s = timeout_s
        self.min_share_values = min_share_values
        self._lock = threading.Lock()
        self._started_or_failed = threading.Condition(self._lock)
        self._idle: list[_Helper] = []
        self._live: set[_Helper] = set()
        self._lent = 0
        self._starting = 0
        self._failed_starts = 0
        self._closed = False
        # Counts, for tests and the curious: what the helpers wrote, and what went wrong.
        self.pieces_by_helpers = 0
        self.started = 0
        self.dropped = 0

    # --- lending -------------------------------------------------------------------------------

    def _borrow(self, want: int) -> list[_Helper]:
        with self._lock:
            self._start_missing()
            taken, self._idle = self._idle[:want], self._idle[want:]
            self._lent += len(taken)
        return [helper for helper in taken if self._settle(helper)]

    def _settle(self, helper: _Helper) -> bool:
        # A helper given back by an abandoned stream still owes texts: read and forget them
        # (at most one job's worth, already being written) before it takes a new job.
        try:
            while helper.owed:
                helper.next_text()
        except (OSError, EOFError, RuntimeError, ValueError, struct.error) as exc:
            self._drop(helper, f"while its abandoned answer was discarded: {exc}")
            return False
        return True

    def _give_back(self, helper: _Helper) -> None:
        with self._lock:
            self._lent -= 1
            if not self._closed:
                self._idle.append(helper)
                return
            self._live.discard(helper)
        helper.close()

    def _drop(self, helper: _Helper, why: str) -> None:
        log.warning("JSON helper process %d dropped: %s", helper.proc.pid, why)
        with self._lock:
            self._lent -= 1
            self.dropped += 1
            self._live.discard(helper)
        try:
            helper.proc.kill()
        except OSError:
            pass
        helper.close()

    # --- starting ------------------------------------------------------------------------------

    def _start_missing(self) -> None:
        # Called with the lock held.
        if self._closed or self._failed_starts >= MAX_FAILED_STARTS:
            return
        missing = self.size - len(self._idle) - self._lent - self._starting
        for _ in range(max(0, missing)):
            self._starting += 1
            threading.Thread(target=self._start_one, name="json-helper-start", daemon=True).start()

    def _start_one(self) -> None:
        helper = None
        try:
            helper = _spawn(self.timeout_s)
        except (OSError, EOFError, ValueError) as exc:
            log.error("a JSON helper process could not start: %s", exc)
        with self._lock:
            self._starting -= 1
            self._started_or_failed.notify_all()
            if helper is None:
                self._failed_starts += 1
                return
            self._failed_starts = 0
            self.started += 1
            if not self._closed:
                self._idle.append(helper)
                self._live.add(helper)
                return
        helper.close()

    def start(self, wait_s: float | None = None) -> int:
        """Start the missing helpers now rather than on the first large response; with
        ``wait_s``, wait (at most that long) until every start has succeeded or failed.
        Returns the helpers ready to lend."""
        with self._lock:
            self._start_missing()
            if wait_s is not None:
                self._started_or_failed.wait_for(lambda: self._starting == 0, timeout=wait_s)
            return len(self._idle)

    @property
    def lent(self) -> int:
        """Helpers lent to responses now."""
        with self._lock:
            return self._lent

    def pids(self) -> list[int]:
        """The helper processes alive now, lent or idle."""
        with self._lock:
            return sorted(h.proc.pid for h in self._live)

    def close(self) -> None:
        """Stop the idle helpers now; lent ones stop when their response gives them back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live.difference_update(idle)
        for helper in idle:
            helper.close()

    # --- writing -------------------------------------------------------------------------------

    def encode(self, items: Sequence[bytes | tuple[np.ndarray, Piece]]) -> Iterator[bytes]:
        """The texts of ``items`` in order: bytes as they are, ``(flat, piece)`` written from the
        C-contiguous values ``flat``."""
        total = sum(item[1].size for item in items if isinstance(item, tuple))
        want = min(self.size, total // self.min_share_values - 1)
        helpers = self._borrow(want) if want > 0 else []
        # In stream order, each piece goes to the writer with the fewest values so far (this
        # process first on a tie): every writer works near the part of the text sent next, and
        # a row-format answer's uneven pieces (a row's 65,536 values, then its last 4,465) still
        # split evenly.
        load = [0] * (len(helpers) + 1)
        owner: dict[int, int] = {}
        for index, item in enumerate(items):
            if isinstance(item, tuple) and item[1].size:
                lane = load.index(min(load))
                owner[index] = lane
                load[lane] += item[1].size
        lane_of: dict[int, _Helper | None] = dict(enumerate(helpers, start=1))
        try:
            for lane, helper in enumerate(helpers, start=1):
                group = [items[i] for i in owner if owner[i] == lane]
                if not group:  # fewer pieces than writers
                    lane_of[lane] = None
                    self._give_back(helper)
                    continue
                try:
                    helper.submit(group)
                except Exception as exc:  # noqa: BLE001 - whatever it is, this process writes the group
                    lane_of[lane] = None
                    self._drop(helper, f"could not take its values: {exc}")
            for index, item in enumerate(items):
                if not isinstance(item, tuple):
                    yield item
                    continue
                helper = lane_of.get(owner.get(index, 0))
                if helper is not None:
                    try:
                        text = helper.next_text()
                    except (OSError, EOFError, RuntimeError, ValueError, struct.error) as exc:
                        self._drop(helper, f"its answer was lost ({exc}); this process writes its pieces")
                        lane_of[owner[index]] = None
                    else:
                        with self._lock:
                            self.pieces_by_helpers += 1
                        yield text
                        continue
                yield jsonpieces.encode(*item)
        finally:
            # Also when the stream was abandoned: then the helper still owes texts, which its next
            # borrower discards. Nothing here waits for a helper's work or starts a thread: this
            # may run wherever the generator is closed, interpreter shutdown included (a closed
            # pool's helper is reaped here, after its socket closes: it exits on end-of-file).
            for helper in lane_of.values():
                if helper is not None:  # a dropped helper's lane is None
                    self._give_back(helper)


def _spawn(timeout_s: float) -> _Helper:
    parent, child = socket.socketpair()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "tfbatch.tfs.json_helpers", str(child.fileno())],
                                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL)
    except BaseException:
        parent.close()
        raise
    finally:
        child.close()
    helper = _Helper(proc, parent)
    try:
        _set_timeout(parent, max(timeout_s, 60.0))  # a cold start imports NumPy from disk
        if _recv_exact(parent, len(READY)) != READY:
            raise ValueError("the helper did not say it was ready")
        _set_timeout(parent, timeout_s)
    except BaseException:
        proc.kill()
        helper.close()
        raise
    return helper


def _set_timeout(sock: socket.socket, seconds: float) -> None:
    # The kernel's timeouts, not settimeout(): that would make the socket non-blocking, and a
    # large recv would come back in many small pieces instead of one MSG_WAITALL read.
    # A read or write that times out raises BlockingIOError (an OSError).
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)


# --- the helper process ------------------------------------------------------------------------


class _Outbox:
    """Texts written but not yet sent. Writing never waits for the server to read: after each
    text, what the socket takes at once is sent (``MSG_DONTWAIT``), and the rest waits for the
    next text or the end of the job. One thread, so nothing contends for the GIL with orjson."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.views: deque[memoryview] = deque()

    def put(self, *buffers: bytes) -> None:
        self.views.extend(sockio.views_of(buffers))
        sockio.send_views(self.sock, self.views, wait=False)

    def flush(self) -> None:
        sockio.send_views(self.sock, self.views)


def _serve(sock: socket.socket) -> None:
    sock.sendall(READY)
    outbox = _Outbox(sock)
    while True:
        try:
            meta_size, data_size = _REQUEST.unpack(_recv_exact(sock, _REQUEST.size))
            meta = orjson.loads(_recv_exact(sock, meta_size))
            data = bytearray(data_size)
            sockio.recv_into(sock, memoryview(data))
        except EOFError:
            return  # the server closed its end or died
        try:
            for dtype, offset, shape, inner, head, tail in meta:
                piece = Piece(head.encode(), 0, tuple(shape), inner, tail.encode())
                flat = np.frombuffer(data, dtype=np.dtype(dtype), count=piece.size, offset=offset)
                text = jsonpieces.encode(flat, piece)
                outbox.put(_LENGTH.pack(len(text)), text)
        except Exception as exc:  # noqa: BLE001 - report it; the server writes the rest itself
            message = f"{type(exc).__name__}: {exc}".encode()
            outbox.put(_LENGTH.pack(ERROR), _LENGTH.pack(len(message)), message)
        outbox.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the server; EOF ends us
    sock = socket.socket(fileno=int(argv[0]))
    # Room for a few texts in flight (the kernel caps it at net.core.wmem_max).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    try:
        _serve(sock)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server went away mid-answer
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
