"""One ``tfbatch serve`` process behind one production variant of one endpoint.

Why a process per variant rather than a ServiceStack inside the API server: the TFS contract
imports ``code/inference.py`` as *the* module ``inference`` once per process and exports the
model's Environment into ``os.environ`` before it runs (COMPAT.md section 2), so two endpoints
with different scripts or variables cannot share a process. A process also keeps a model's
TensorFlow threads, a crashing script or a leaking handler away from the control plane and the
other endpoints, and it is exactly what ``tfbatch serve`` runs, so InvokeEndpoint has the same
handler semantics by construction. The price is one loopback HTTP hop per invocation
(benchmarks/apiserver/ measures it).

The process binds a free 127.0.0.1 port (``--port 0``), has no public gRPC server (the SageMaker
Runtime API has none), reports its port through ``--ready-file`` and writes its log lines to a
pipe that a reader thread hands to ``on_line`` (the endpoint's CloudWatch log stream).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Callable, Mapping

from tfbatch.errors import Unavailable

# A marker in the command line: after a kill -9 of the API server, a restarted one finds the
# processes it had started (their pids are in its state) and can tell them from a reused pid.
MARKER = "--ready-file"
# As long as AWS lets a model take before InvokeEndpoint gives up; serve's own default is 60 s.
INVOKE_TIMEOUT_S = 70.0
POOLED_CONNECTIONS = 16
# Errors meaning a kept-alive connection was closed by the server while idle: the request never
# reached the model, so sending it once more on a fresh connection is safe.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class EndpointProcess:
    """Start, wait for, count requests on, drain and stop one serve process."""

    def __init__(
        self,
        model_uri: str,
        run_dir: str | os.PathLike,
        *,
        env: Mapping[str, str] | None = None,
        workers: int = 1,
        on_line: Callable[[str], None] | None = None,
        instance_id: str | None = None,
    ):
        self.model_uri = model_uri
        self.instance_id = instance_id or "i-" + uuid.uuid4().hex[:17]
        self.ready_file = Path(run_dir) / f"{self.instance_id}.ready.json"
        self.env = dict(env or {})
        self.workers = workers
        self.on_line = on_line
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._inflight = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._reader: threading.Thread | None = None
        # The last lines it wrote: a FailureReason names what went wrong, not just an exit status.
        self._tail: deque[str] = deque(maxlen=3)
        self._connections: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue(POOLED_CONNECTIONS)

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> "EndpointProcess":
        self.ready_file.parent.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        env = dict(os.environ)
        env.update(self.env)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        cmd = [sys.executable, "-m", "tfbatch.serve", self.model_uri, "--host", "127.0.0.1", "--port", "0",
               "--grpc-port", "-1", "--workers", str(self.workers), MARKER, str(self.ready_file),
               "--log-level", "info"]
        # Its own session: a Ctrl-C meant for the API server's terminal must not reach the
        # endpoint before the server has drained it.
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._reader = threading.Thread(target=self._read_lines, name=f"log-{self.instance_id}", daemon=True)
        self._reader.start()
        return self

    def _read_lines(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line:
                self._tail.append(line)
            if line and self.on_line is not None:
                try:
                    self.on_line(line)
                except Exception:  # a log sink failure must not stop the reader (the pipe would fill)
                    pass

    def wait_ready(self, timeout: float, cancelled: Callable[[], bool] = lambda: False) -> int:
        """Block until the process has loaded its model and listens; its port.

        Raises :class:`Unavailable` with the process's last words if it exits first."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            code = self.proc.poll()
            if code is not None:
                raise Unavailable(f"the model server exited with status {code} before it was ready"
                                  f"{self._last_words()}")
            if cancelled():
                raise Unavailable("the endpoint was deleted while its model server started")
            if time.monotonic() > deadline:
                raise Unavailable(f"the model server was not ready within {timeout:.0f} s{self._last_words()}")
            time.sleep(0.05)
        self.port = int(json.loads(self.ready_file.read_text())["port"])
        return self.port

    def _last_words(self) -> str:
        if self._reader is not None and self.proc is not None and self.proc.poll() is not None:
            self._reader.join(timeout=2)  # the pipe is closed: what it wrote is all read
        return (": " + " | ".join(self._tail))[:1000] if self._tail else ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def url(self) -> str:
        if self.port is None:
            raise Unavailable("the endpoint's model server is not ready")
        return f"http://127.0.0.1:{self.port}"

    # -- requests -----------------------------------------------------------------------------
    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str | None, str | None, bytes]:
        """POST to the process: (status, content type, custom attributes header, body).

        Plain ``http.client`` over kept-alive loopback connections, reused by whichever handler
        thread comes next: the hop costs a fraction of a millisecond, where a general-purpose
        client adds its own per-request work (benchmarks/apiserver/ measures the total)."""
        try:
            conn, reused = self._connections.get_nowait(), True
        except queue.Empty:
            conn, reused = self._connect(), False
        try:
            try:
                conn.request("POST", path, body, headers)
                response = conn.getresponse()
            except _STALE:
                if not reused:
                    raise
                conn.close()
                conn = self._connect()
                conn.request("POST", path, body, headers)
                response = conn.getresponse()
            payload = response.read()
        except BaseException:
            conn.close()
            raise
        if response.will_close or self.proc is None or self.proc.poll() is not None:
            conn.close()
        else:
            try:
                self._connections.put_nowait(conn)
            except queue.Full:
                conn.close()
        return (response.status, response.getheader("content-type"),
                response.getheader("x-amzn-sagemaker-custom-attributes"), payload)

    def _connect(self) -> http.client.HTTPConnection:
        if self.port is None:
            raise Unavailable("the endpoint's model server is not ready")
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=INVOKE_TIMEOUT_S)

    def _close_connections(self) -> None:
        while True:
            try:
                self._connections.get_nowait().close()
            except queue.Empty:
                return

    # -- in-flight accounting (for drains) --------------------------------------------------
    def acquire(self) -> None:
        with self._lock:
            self._inflight += 1

    def release(self) -> None:
        with self._lock:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.notify_all()

    @property
    def inflight(self) -> int:
        return self._inflight

    def drain(self, timeout: float) -> bool:
        """Wait until no request routed here is still running (routing has moved away first)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout=timeout)

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM (serve finishes what it has in flight), SIGKILL after ``grace`` seconds."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_connections()
        if self._reader is not None:
            self._reader.join(timeout=5)
        self.ready_file.unlink(missing_ok=True)


def kill_orphan(pid: int, ready_file: str) -> bool:
    """Kill a serve process a previous (killed) API server started, if ``pid`` is still it.

    The command line must name ``ready_file``; a pid the OS has since given to another
    program is left alone. True when a process was killed."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if ready_file.encode() not in cmdline:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)  # its --workers children share its session and group
    except ProcessLookupError:
        return False
    return True
