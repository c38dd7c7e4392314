"""A real multi-node Ray cluster on this machine, for tests and local demos.

Each node is started with ``ray start`` (a head plus extra nodes joining it), so the code
under test connects, schedules and fails over exactly as on a cluster of machines. Every
node has its own short temp dir under /tmp (Unix socket paths are limited to ~107 bytes)
and its own ports, all picked free on 127.0.0.1, so several clusters — other people's
included — can run side by side.

Stopping never uses ``ray stop``: that kills every Ray process of the user on the machine.
A node's processes are found instead by its temp dir in their command line (GCS, raylet,
agents) plus their descendants (the worker processes the raylet forks), and only those
are killed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tfbatch.errors import DependencyMissing, Unavailable
from tfbatch.ports import free_ports

OBJECT_STORE_BYTES = 200_000_000


def ray_executable() -> str:
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if not found:
        raise DependencyMissing("the 'ray' command is not installed: pip install 'tfbatch[ray]'")
    return found


@dataclass
class RayNode:
    index: int
    temp_dir: str
    head: bool
    alive: bool = True
    args: list[str] = field(default_factory=list)


def _process_token() -> str:
    global _TOKEN
    if _TOKEN is None:
        _TOKEN = os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32)
    return _TOKEN


_TOKEN: str | None = None


class LocalRayCluster:
    """``LocalRayCluster(nodes=2).start()``; ``.address`` for ``ray.init``; ``.stop()``.

    Node 0 is the head. ``kill_node(i)`` SIGKILLs one node's processes (a machine dying);
    ``worker_pids(name)`` finds Ray worker processes of this cluster by their title, e.g.
    the actor class name, for killing one worker.
    """

    def __init__(self, nodes: int = 2, *, num_cpus: float = 1, object_store_memory: int = OBJECT_STORE_BYTES,
                 env: dict[str, str] | None = None, start_timeout: float = 90.0):
        if nodes < 1:
            raise ValueError(f"nodes: expected >= 1, got {nodes}")
        self.node_count = nodes
        self.num_cpus = num_cpus
        self.object_store_memory = object_store_memory
        self.env = env or {}
        self.start_timeout = start_timeout
        self.root = ""
        self.port: int | None = None
        self.nodes: list[RayNode] = []

    @property
    def address(self) -> str:
        if self.port is None:
            raise Unavailable("LocalRayCluster is not started: call start() or use it as a context manager")
        return f"127.0.0.1:{self.port}"

    # ---- life cycle ---------------------------------------------------------------------

    def start(self) -> "LocalRayCluster":
        self.root = tempfile.mkdtemp(prefix="tfr", dir="/tmp")
        # Ray 2.60 turns token authentication on by itself once a ~/.ray/auth_token exists
        # (any local ray.init() writes one), and a node or driver without the token is then
        # refused. A token of this cluster's own, in the nodes' and this process's environment
        # (drivers and tfbatch subprocesses inherit it), works whatever the machine holds.
        # One token per process: a Ray driver reads it once and keeps it for later clusters.
        self._auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": _process_token()}
        self._saved_env = {name: os.environ.get(name) for name in self._auth}
        os.environ.update(self._auth)
        try:
            for index in range(self.node_count):
                self._start_node(index)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, index: int) -> None:
        head = index == 0
        temp_dir = os.path.join(self.root, f"n{index}")
        os.makedirs(temp_dir, exist_ok=True)
        # The head's GCS port comes from the same call as its other ports: picked apart, the OS
        # had handed the GCS port out again as another component's (nothing listened on it yet),
        # and `ray start` refused the clash ("... is trying to use a port number ... that is
        # used by other components"). A later node's ports skip those listening already.
        ports = free_ports(9 if head else 8)
        if head:
            self.port = ports[8]
        args = [
            ray_executable(), "start",
            "--node-ip-address", "127.0.0.1",
            "--num-cpus", str(self.num_cpus),
            "--num-gpus", "0",
            "--object-store-memory", str(self.object_store_memory),
            "--temp-dir", temp_dir,
            "--disable-usage-stats",
            "--object-manager-port", str(ports[0]),
            "--node-manager-port", str(ports[1]),
            "--dashboard-agent-listen-port", str(ports[2]),
            "--dashboard-agent-grpc-port", str(ports[3]),
            "--runtime-env-agent-port", str(ports[4]),
            "--metrics-export-port", str(ports[5]),
        ]
        if head:
            args += ["--head", "--port", str(self.port), "--include-dashboard", "false",
                     "--dashboard-port", str(ports[7]),
                     "--ray-client-server-port", str(ports[6])]
        else:
            args += ["--address", self.address]
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **self._auth, **self.env}
        node = RayNode(index, temp_dir, head, args=args)
        self.nodes.append(node)
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=self.start_timeout)
        if proc.returncode != 0:
            raise Unavailable(
                f"ray start for node {index} failed with status {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}"
            )

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive:
                self._kill(node)
        self.nodes = []
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = ""
        for name, value in getattr(self, "_saved_env", {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = {}

    def kill_node(self, index: int) -> None:
        """SIGKILL every process of node ``index`` (not the head: the cluster would be gone)."""
        node = self.nodes[index]
        if node.head:
            raise ValueError("kill_node: node 0 is the head; killing it ends the cluster (use stop())")
        self._kill(node)

    def _kill(self, node: RayNode) -> None:
        procs = self._node_processes(node)
        for proc in procs:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=10)
        node.alive = False

    # ---- finding processes --------------------------------------------------------------

    @staticmethod
    def _roots(temp_dir: str) -> list[psutil.Process]:
        uid = os.getuid()
        roots = []
        for proc in psutil.process_iter(["cmdline", "uids"]):
            try:
                if proc.info["uids"] and proc.info["uids"].real != uid:
                    continue
                if any(temp_dir in part for part in (proc.info["cmdline"] or [])):
                    roots.append(proc)
            except psutil.Error:
                continue
        return roots

    def _node_processes(self, node: RayNode) -> list[psutil.Process]:
        # "/tmp/tfrXXXX/n1" is also a prefix of ".../n10": match the path with its separator.
        marker = node.temp_dir + os.sep
        found: dict[int, psutil.Process] = {}
        for root in self._roots(marker):
            found[root.pid] = root
            try:
                for child in root.children(recursive=True):
                    found[child.pid] = child
            except psutil.Error:
                continue
        found.pop(os.getpid(), None)
        return list(found.values())

    def worker_pids(self, title: str = "ray::") -> list[int]:
        """Pids of this cluster's worker processes whose title contains ``title``."""
        pids = []
        for node in self.nodes:
            if not node.alive:
                continue
            for proc in self._node_processes(node):
                try:
                    if title in " ".join(proc.cmdline()):
                        pids.append(proc.pid)
                except psutil.Error:
                    continue
        return sorted(set(pids))

    def wait_for_nodes(self, timeout: float = 60.0) -> None:
        """Block until every started node is registered alive (uses a short-lived driver)."""
        code = (
            "import ray,sys,time\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False)\n"
            f"deadline=time.monotonic()+{timeout}\n"
            f"while sum(n['Alive'] for n in ray.nodes())<{sum(n.alive for n in self.nodes)}:\n"
            "    if time.monotonic()>deadline: sys.exit(1)\n"
            "    time.sleep(0.2)\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout + 30)
        if proc.returncode != 0:
            raise Unavailable(f"Ray nodes did not all come up within {timeout}s: {proc.stderr[-1500:]}")

    def __enter__(self) -> "LocalRayCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
