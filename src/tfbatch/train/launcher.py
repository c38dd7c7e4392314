"""Start N local training workers, each a process with its own ``TF_CONFIG``.

``MultiWorkerMirroredStrategy`` needs one process per worker and a cluster spec
naming every worker's address; locally those are free ports on 127.0.0.1. The
same worker code runs unchanged on separate machines given their TF_CONFIG.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tfbatch.errors import ModelError, RequestTimeout
from tfbatch.ports import free_ports
from tfbatch.train.config import TrainConfig, TrainResult


def tf_config(ports: list[int], index: int) -> str:
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


class LocalWorkers:
    """The worker processes of one training run; the chief is index 0.

    Each worker's stdout/stderr go to ``<out_dir>/logs/worker-<i>.log`` (process
    output, for diagnosing a crash; metrics and checkpoints come from the chief only).
    """

    def __init__(self, config: TrainConfig):
        self.config = config
        self.processes: list[subprocess.Popen] = []

    def start(self) -> "LocalWorkers":
        config = self.config
        config.log_dir.mkdir(parents=True, exist_ok=True)
        config_path = config.out_dir / "train-config.json"
        config_path.write_text(config.model_dump_json(indent=2))
        ports = free_ports(config.workers)
        for index in range(config.workers):
            env = dict(os.environ)
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            if config.workers > 1:
                env["TF_CONFIG"] = tf_config(ports, index)
            else:
                env.pop("TF_CONFIG", None)
            log = open(config.log_dir / f"worker-{index}.log", "ab")
            self.processes.append(subprocess.Popen(
                [sys.executable, "-m", "tfbatch.train.trainer", str(config_path)],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            ))
            log.close()
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait()

    def wait(self) -> TrainResult:
        """Wait for every worker; one failing stops the rest (the others would block in
        collectives forever)."""
        deadline = time.monotonic() + self.config.timeout_s
        try:
            while True:
                codes = [p.poll() for p in self.processes]
                failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
                if failed:
                    index = failed[0]
                    tail = _tail(self.config.log_dir / f"worker-{index}.log")
                    raise ModelError(
                        f"training worker {index} exited with status {codes[index]}; "
                        f"last output:\n{tail}"
                    )
                if all(code == 0 for code in codes):
                    break
                if time.monotonic() > deadline:
                    raise RequestTimeout(
                        f"training did not finish within timeout_s={self.config.timeout_s}"
                    )
                time.sleep(0.2)
        finally:
            self.stop()
        return TrainResult.model_validate_json(self.config.result_path.read_text())


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def train(config: TrainConfig) -> TrainResult:
    """Train with ``config.workers`` local processes; resumes from the last checkpoint
    in ``config.out_dir`` if one exists."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    config.result_path.unlink(missing_ok=True)
    return LocalWorkers(config).start().wait()
