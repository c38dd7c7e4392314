"""The live side of endpoints: which serve processes answer which endpoint, and their moves.

State (the ``endpoint`` documents in the server's SQLite) says what should be running; this
component makes it so in background threads, so that CreateEndpoint, UpdateEndpoint and
DeleteEndpoint answer at once, as on AWS, and the status moves on its own:

- create:  Creating -> (processes ready) InService, or Failed with the reason;
- update:  Updating -> new processes ready -> routing switched -> InService; then the old
  processes drain (requests already routed to them finish) and stop. A failed update leaves
  the old config serving (InService, FailureReason set), as AWS rolls back;
- delete:  Deleting -> routing removed -> drain -> stop -> the document is gone.

After a ``kill -9`` of the API server its serve processes outlive it (own sessions); the pids
are in the documents, so :meth:`EndpointWorkers.recover` kills those orphans and starts every
endpoint that was InService, Creating or Updating again from its stored config; an InService
one shows SystemUpdating (AWS's maintenance status) until its processes are ready again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tfbatch.apiserver.endpoint_process import EndpointProcess, kill_orphan
from tfbatch.errors import Unavailable

log = logging.getLogger(__name__)

ENDPOINT = "endpoint"
ENDPOINT_CONFIG = "endpoint-config"
LOG_GROUP = "/aws/sagemaker/Endpoints"


@dataclass
class Variant:
    name: str
    weight: float
    processes: list[EndpointProcess]


class Route:
    """One endpoint's variants as routed now; replaced whole on an update (never edited)."""

    def __init__(self, variants: list[Variant]):
        self.variants = variants

    def pick(self, target: str | None) -> Variant | None:
        if target is not None:
            return next((v for v in self.variants if v.name == target), None)
        if len(self.variants) == 1:
            return self.variants[0]
        total = sum(v.weight for v in self.variants)
        point = random.uniform(0, total)
        for v in self.variants:
            point -= v.weight
            if point <= 0:
                return v
        return self.variants[-1]

    def processes(self) -> list[EndpointProcess]:
        return [p for v in self.variants for p in v.processes]


class EndpointWorkers:
    """Serve processes per endpoint; every state change of an endpoint goes through here."""

    def __init__(self, state: Any, run_dir: str | Path, resolve_model: Callable[[str], dict[str, Any]], *,
                 start_timeout: float = 600.0, drain_timeout: float = 60.0):
        self.state = state
        self.run_dir = Path(run_dir)
        self.resolve_model = resolve_model  # model name -> {"ModelDataUrl": ..., "Environment": {...}}
        self.start_timeout = start_timeout
        self.drain_timeout = drain_timeout
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._deleted: set[str] = set()
        self._closing = False
        self._logs = LogBuffer(state)

    # -- requests ---------------------------------------------------------------------------
    def acquire(self, endpoint: str, target_variant: str | None = None) -> tuple[EndpointProcess, str]:
        """A ready process of ``endpoint`` with its in-flight count raised; release() it after."""
        with self._lock:
            route = self._routes.get(endpoint.lower())
            if route is None:
                raise LookupError(endpoint)
            variant = route.pick(target_variant)
            if variant is None:
                raise KeyError(target_variant)
            # Least loaded process of the variant: its --workers already spread one process's load.
            proc = min(variant.processes, key=lambda p: p.inflight)
            proc.acquire()  # under the lock: a switch cannot drain it between pick and count
            return proc, variant.name

    def is_routed(self, endpoint: str) -> bool:
        return endpoint.lower() in self._routes

    # -- transitions ------------------------------------------------------------------------
    def _background(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except Exception:  # noqa: BLE001 - the transition records its own failure; this is a bug guard
                log.exception("endpoint %s: transition failed", name)
            finally:
                self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=run, name=f"endpoint-{name}", daemon=True)
        self._threads.add(thread)
        thread.start()

    def create(self, name: str) -> None:
        self._deleted.discard(name.lower())
        self._background(name, lambda: self._deploy(name, updating=False))

    def update(self, name: str) -> None:
        self._background(name, lambda: self._deploy(name, updating=True))

    def delete(self, name: str) -> None:
        self._deleted.add(name.lower())
        self._background(name, lambda: self._remove(name))

    def _start_variants(self, name: str, config: dict[str, Any]) -> list[Variant]:
        """Start every variant's process and wait for all of them; stop all on any failure."""
        variants: list[Variant] = []
        started: list[EndpointProcess] = []
        try:
            for spec in config["ProductionVariants"]:
                model = self.resolve_model(spec["ModelName"])
                stream_prefix = spec["VariantName"]
                proc = EndpointProcess(
                    model["ModelDataUrl"], self.run_dir / name.lower(), env=model.get("Environment") or {},
                    workers=int(spec.get("InitialInstanceCount") or 1),
                )
                proc.on_line = self._log_sink(name, f"{stream_prefix}/{proc.instance_id}")
                started.append(proc.start())
                variants.append(Variant(spec["VariantName"], float(spec.get("InitialVariantWeight", 1.0)), [proc]))
            self._record_processes(name, started, pending=True)
            for proc in started:
                proc.wait_ready(self.start_timeout, cancelled=lambda: self._closing or name.lower() in self._deleted)
        except BaseException:
            for proc in started:
                proc.stop(grace=5)
            raise
        return variants

    def _deploy(self, name: str, *, updating: bool) -> None:
        doc = self.state.get(ENDPOINT, name)
        if doc is None:
            return
        config_name = doc.get("_TargetConfig") or doc["EndpointConfigName"]
        config = self.state.get(ENDPOINT_CONFIG, config_name)
        try:
            if config is None:
                raise Unavailable(f'the endpoint configuration "{config_name}" was deleted before it was deployed')
            variants = self._start_variants(name, config)
        except Exception as exc:  # noqa: BLE001 - every failure becomes the endpoint's FailureReason
            reason = str(exc)[:1024] or type(exc).__name__
            log.warning("endpoint %s: %s", name, reason)
            if name.lower() in self._deleted or self._closing:
                return
            if updating:  # the old config keeps serving, as AWS rolls a failed update back
                self.state.update(ENDPOINT, name, EndpointStatus="InService", FailureReason=reason,
                                  _TargetConfig=None, LastModifiedTime=time.time())
            else:
                self.state.update(ENDPOINT, name, EndpointStatus="Failed", FailureReason=reason,
                                  LastModifiedTime=time.time())
            return
        with self._lock:
            if name.lower() in self._deleted or self._closing:
                old = Route(variants)  # deleted while starting: stop what was just started
            else:
                old = self._routes.get(name.lower())
                self._routes[name.lower()] = Route(variants)
        if old is not None and old.variants is variants:
            self._stop_route(old)
            return
        self._record_processes(name, [p for v in variants for p in v.processes], pending=False)
        self.state.update(
            ENDPOINT, name, EndpointStatus="InService", EndpointConfigName=config["EndpointConfigName"],
            FailureReason=None, _TargetConfig=None, LastModifiedTime=time.time(),
            ProductionVariants=_variant_summaries(config),
        )
        if old is not None:
            self._stop_route(old)

    def _stop_route(self, route: Route) -> None:
        for proc in route.processes():
            if not proc.drain(self.drain_timeout):
                log.warning("instance %s: %d requests still running after %.0f s; stopping it anyway",
                            proc.instance_id, proc.inflight, self.drain_timeout)
            proc.stop()

    def _remove(self, name: str) -> None:
        with self._lock:
            route = self._routes.pop(name.lower(), None)
        if route is not None:
            self._stop_route(route)
        self.state.delete(ENDPOINT, name)

    # -- persistence of what runs -----------------------------------------------------------
    def _record_processes(self, name: str, procs: list[EndpointProcess], *, pending: bool) -> None:
        entries = [{"pid": p.pid, "ready_file": str(p.ready_file)} for p in procs]
        doc = self.state.get(ENDPOINT, name) or {}
        key = "_PendingProcesses" if pending else "_Processes"
        if pending:
            self.state.update(ENDPOINT, name, _PendingProcesses=doc.get("_PendingProcesses", []) + entries)
        else:
            self.state.update(ENDPOINT, name, **{key: entries, "_PendingProcesses": None})

    def _log_sink(self, endpoint: str, stream: str) -> Callable[[str], None]:
        group = f"{LOG_GROUP}/{endpoint}"
        return lambda line: self._logs.add(group, stream, line)

    def recover(self) -> None:
        """After a restart: kill the previous server's processes and bring the endpoints back."""
        for doc in self.state.list(ENDPOINT):
            name = doc["EndpointName"]
            for entry in doc.get("_Processes", []) + doc.get("_PendingProcesses", []):
                if kill_orphan(entry["pid"], entry["ready_file"]):
                    log.info("endpoint %s: stopped pid %s left by the previous server", name, entry["pid"])
            self.state.update(ENDPOINT, name, _Processes=None, _PendingProcesses=None)
            status = doc.get("EndpointStatus")
            if status == "Deleting":
                self.state.delete(ENDPOINT, name)
            elif status in ("InService", "Creating", "SystemUpdating"):
                if status == "InService":
                    # AWS's status for maintenance that changes nothing the user set: the
                    # endpoint_in_service waiter keeps polling through it until InService again.
                    self.state.update(ENDPOINT, name, EndpointStatus="SystemUpdating", LastModifiedTime=time.time())
                self._background(name, lambda n=name: self._deploy(n, updating=False))
            elif status == "Updating":
                self._background(name, lambda n=name: self._deploy(n, updating=True))

    def close(self) -> None:
        """Server shut-down: stop every serve process (they come back on the next start)."""
        self._closing = True
        with self._lock:
            routes, self._routes = list(self._routes.values()), {}
        for route in routes:
            for proc in route.processes():
                proc.stop(grace=10)
        for thread in list(self._threads):
            thread.join(timeout=15)
        self._logs.close()


class LogBuffer:
    """Endpoint log lines, written to the state in one transaction per stream every half second.

    A serve process logs a line per request; one committed (fsynced) SQLite write per line
    would cost every invocation a disk flush on the API server."""

    def __init__(self, state: Any, interval_s: float = 0.5):
        self.state = state
        self.interval_s = interval_s
        self._pending: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="endpoint-logs", daemon=True)
        self._thread.start()

    def add(self, group: str, stream: str, line: str) -> None:
        with self._lock:
            self._pending.setdefault((group, stream), []).append((int(time.time() * 1000), line))

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for (group, stream), events in pending.items():
            try:
                self.state.put_log_events(group, stream, events)
            except Exception:  # noqa: BLE001 - a closed state at shut-down; the lines are lost, not the server
                log.debug("could not write %d log lines of %s", len(events), stream)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.flush()


def _variant_summaries(config: dict[str, Any]) -> list[dict[str, Any]]:
    """DescribeEndpoint's ProductionVariants for a config that is now fully deployed."""
    return [
        {"VariantName": v["VariantName"], "CurrentWeight": float(v.get("InitialVariantWeight", 1.0)),
         "DesiredWeight": float(v.get("InitialVariantWeight", 1.0)),
         "CurrentInstanceCount": int(v.get("InitialInstanceCount") or 1),
         "DesiredInstanceCount": int(v.get("InitialInstanceCount") or 1)}
        for v in config["ProductionVariants"]
    ]
