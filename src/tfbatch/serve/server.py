"""``tfbatch serve``: one worker process, or a supervisor of N workers sharing the ports.

A worker: open the artifact -> load every model -> load code/inference.py -> start gRPC ->
listen on HTTP. It listens only once models are loaded, so ``/ping`` answers 200 from any
worker that answers at all. SIGTERM/SIGINT: uvicorn stops accepting and finishes in-flight
requests (up to ``graceful_timeout_s``), then gRPC drains with the same grace, then batchers.

``--workers N``: N worker processes, each binding the HTTP and gRPC ports with SO_REUSEPORT so
the kernel spreads connections over them. Processes rather than uvicorn's own ``workers=``
because each must load models and start its own gRPC server, and because TensorFlow must
never be forked. Handler scripts get ``context.rest_uri``/``grpc_port`` pointing at a
per-worker loopback TFS endpoint (127.0.0.1): a script's sub-request then never waits behind
the ``/invocations`` threads that issued it. That endpoint answers the worker's own processes
without credentials (unchanged scripts send none) and anyone else only with the endpoint's
token (tfbatch.tfs.loopback_auth).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvicorn

from tfbatch.serve.connections import header_timeout_protocol
from tfbatch.serve.metrics import MULTIPROC_ENV
from tfbatch.tfs.loopback import bind_socket
from tfbatch.serve.settings import ServeSettings

log = logging.getLogger(__name__)

SETTINGS_ENV = "TFBATCH_SERVE_WORKER_SETTINGS"


class _Server(uvicorn.Server):
    """uvicorn.Server that reports readiness once it is listening, and its end once it starts
    to drain (not once it has drained: probes must stop sending work during the drain)."""

    def __init__(self, config: uvicorn.Config, on_started, on_shutdown):
        super().__init__(config)
        self._on_started = on_started
        self._on_shutdown = on_shutdown

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_started()

    async def shutdown(self, sockets=None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets=sockets)


def _write_ready(path: str | None, info: dict[str, Any]) -> None:
    if not path:
        return
    tmp = Path(f"{path}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(info))
    tmp.replace(path)  # atomic: a reader never sees half a file


def run_worker(model_uri: str, settings: ServeSettings, *, ready_file: str | None = None) -> int:
    from tfbatch.tfs.json_helpers import JsonHelpers, auto_size

    # Started first, so that they come up while the model loads; a helper that cannot start
    # costs only the speed of large JSON answers.
    size = settings.json_helpers if settings.json_helpers is not None else auto_size(settings.workers)
    json_helpers = JsonHelpers(size) if size else None
    if json_helpers is not None:
        json_helpers.start()
    try:
        return _serve(model_uri, settings, ready_file, json_helpers)
    finally:
        if json_helpers is not None:
            json_helpers.close()


def _serve(model_uri: str, settings: ServeSettings, ready_file: str | None, json_helpers: Any) -> int:
    from tfbatch.handlers.stack import build_stack
    from tfbatch.serve.app import build_app
    from tfbatch.serve.auth import BearerAuthInterceptor
    from tfbatch.serve.grpc_health import NOT_SERVING, SERVING, HealthService
    from tfbatch.tfs.grpc_service import start_grpc_server

    # The JSON routes charge a request's tensors against the same budget as gRPC does.
    runtime = settings.runtime_settings().model_copy(update={"max_request_bytes": settings.max_request_bytes})
    # Handler scripts reach the models through the stack's own loopback endpoints (never
    # blocked behind the /invocations calls that made them), not the public ports.
    stack = build_stack(
        model_uri, runtime, install_requirements=settings.install_requirements,
        grpc_max_message_bytes=settings.grpc_max_message_bytes, loopback_token=settings.auth_token,
    )
    model_server, service = stack.model_server, stack.service  # warmed up by build_stack, before anything listens

    grpc_server, grpc_port = None, None
    # NOT_SERVING until HTTP listens too, and again from the moment shutdown starts draining.
    health = HealthService(services=("", "tensorflow.serving.PredictionService"))
    if settings.grpc_port >= 0:
        try:
            grpc_server, grpc_port = start_grpc_server(
                model_server,
                host=settings.host,
                port=settings.grpc_port,
                max_message_bytes=settings.grpc_max_message_bytes,
                max_workers=settings.grpc_threads,
                reuse_port=settings.reuse_port,
                interceptors=[BearerAuthInterceptor(settings.auth_token)] if settings.auth_token else (),
                max_request_bytes=settings.max_request_bytes,
                max_concurrent_rpcs=settings.grpc_max_concurrent_rpcs,
                timeout_s=settings.request_timeout_s,
                extra_handlers=[health.handler()],
            )
        except BaseException:
            stack.close()
            raise
    sock = bind_socket(settings.host, settings.port, reuse_port=settings.reuse_port)
    port = sock.getsockname()[1]
    info = {"host": settings.host, "port": port, "grpc_port": grpc_port, "pid": os.getpid(),
            "models": {n: model_server.versions(n) for n in model_server.model_names()}}
    if stack.endpoints is not None:
        info["loopback"] = {"rest_port": stack.endpoints.rest_port, "grpc_port": stack.endpoints.grpc_port}

    def started() -> None:
        log.info("tfbatch serve: http://%s:%s (gRPC port %s), models %s", settings.host, port, grpc_port, info["models"])
        print(f"tfbatch serve: listening on http://{settings.host}:{port} grpc={grpc_port}", flush=True)
        health.set(SERVING)
        _write_ready(ready_file, info)

    if json_helpers is not None:
        json_helpers.start(wait_s=60)
    config = uvicorn.Config(
        build_app(service, settings, ready=lambda: model_server.ready, json_helpers=json_helpers),
        log_level=settings.log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=settings.graceful_timeout_s,
        timeout_keep_alive=settings.keep_alive_s,
        limit_concurrency=settings.max_connections,
        http=header_timeout_protocol(settings.header_timeout_s),
    )
    # uvicorn re-raises the signal that stopped it once it has drained, under the handler that
    # was installed before it ran; with the default one the process would die right there,
    # before gRPC and the batchers drain. A no-op handler lets the cleanup below run.
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        _Server(config, started, lambda: health.set(NOT_SERVING)).run(sockets=[sock])
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        health.set(NOT_SERVING)
        if grpc_server is not None:
            grpc_server.stop(settings.graceful_timeout_s).wait(settings.graceful_timeout_s + 1)
        stack.close()
        sock.close()
    return 0


def run_server(model_uri: str, settings: ServeSettings, *, ready_file: str | None = None) -> int:
    if settings.workers == 1:
        return run_worker(model_uri, settings, ready_file=ready_file)
    return Supervisor(model_uri, settings, ready_file).run()


class Supervisor:
    """Starts N worker processes on shared ports, forwards SIGTERM/SIGINT, restarts crashed ones."""

    MAX_RESTARTS = 5

    def __init__(self, model_uri: str, settings: ServeSettings, ready_file: str | None):
        self.model_uri = model_uri
        self.ready_file = ready_file
        # Port 0 means "any free port", but all workers must share one: reserve it here with a
        # bound, never-listening SO_REUSEPORT socket (it takes no connections) kept open meanwhile.
        self._reserved = []
        port, grpc_port = settings.port, settings.grpc_port
        if port == 0:
            port = self._reserve(settings.host)
        if grpc_port == 0:
            grpc_port = self._reserve(settings.host)
        self.settings = settings.model_copy(update={"port": port, "grpc_port": grpc_port, "reuse_port": True})
        self.children: dict[int, subprocess.Popen] = {}
        self._stopping = False
        # One metrics directory for all workers, so any worker's /metrics counts every worker's
        # requests; a fresh one per run, since stale files would add a previous run's counts.
        self._metrics_dir = None
        if not os.environ.get(MULTIPROC_ENV):
            self._metrics_dir = tempfile.TemporaryDirectory(prefix="tfbatch-metrics-")

    def _reserve(self, host: str) -> int:
        sock = bind_socket(host, 0, reuse_port=True)
        self._reserved.append(sock)
        return sock.getsockname()[1]

    def _forget_worker_metrics(self, pid: int) -> None:
        """A dead worker's live gauges (its in-flight count) must stop counting."""
        from prometheus_client import multiprocess

        directory = self._metrics_dir.name if self._metrics_dir is not None else os.environ.get(MULTIPROC_ENV)
        if directory:
            multiprocess.mark_process_dead(pid, directory)

    def _spawn(self, index: int) -> subprocess.Popen:
        env = dict(os.environ, **{SETTINGS_ENV: self.settings.model_dump_json()})
        if self._metrics_dir is not None:
            env[MULTIPROC_ENV] = self._metrics_dir.name
        cmd = [sys.executable, "-m", "tfbatch.serve", "--worker", self.model_uri]
        if self.ready_file:
            cmd += ["--ready-file", f"{self.ready_file}.worker{index}"]
        return subprocess.Popen(cmd, env=env)

    def _stop(self, signum, frame) -> None:
        self._stopping = True
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGTERM, signal.SIGINT)}
        restarts = 0
        announced = False
        try:
            self.children = {i: self._spawn(i) for i in range(self.settings.workers)}
            while True:
                if not announced and self.ready_file and all(
                    Path(f"{self.ready_file}.worker{i}").exists() for i in self.children
                ):
                    worker = json.loads(Path(f"{self.ready_file}.worker0").read_text())
                    _write_ready(self.ready_file, dict(worker, pid=os.getpid(), workers=len(self.children)))
                    announced = True
                for i, child in list(self.children.items()):
                    code = child.poll()
                    if code is None or self._stopping:
                        continue
                    self._forget_worker_metrics(child.pid)
                    restarts += 1
                    if restarts > self.MAX_RESTARTS:
                        log.error("worker %d exited with %s; too many restarts, stopping", i, code)
                        self._stop(None, None)
                        break
                    log.warning("worker %d exited with %s; restarting it", i, code)
                    self.children[i] = self._spawn(i)
                if self._stopping and all(c.poll() is not None for c in self.children.values()):
                    break
                time.sleep(0.1)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            for sock in self._reserved:
                sock.close()
            if self._metrics_dir is not None:
                self._metrics_dir.cleanup()
        return 0 if restarts <= self.MAX_RESTARTS else 1
