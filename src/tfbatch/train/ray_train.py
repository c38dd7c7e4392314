"""``tfbatch train --engine ray``: the same data-parallel training, its workers placed by Ray Train.

Ray Train's ``TensorflowTrainer`` starts one worker actor per replica and sets each one's
``TF_CONFIG`` (the cluster spec ``MultiWorkerMirroredStrategy`` reads), so the worker body
is the unchanged :func:`tfbatch.train.trainer.run_worker`: same model, input pipeline,
warm-up schedule, chief-only checkpoints and export. Only placement changes — Ray picks
the machines (GPUs with ``gpus_per_worker``) instead of local processes on free ports.

``config.out_dir`` and ``config.data_dir`` must be visible to every worker under the same
path: always true on a one-machine cluster; on a real one, a shared file system (NFS, EFS,
a FUSE-mounted bucket). Resuming works as with the local launcher: the chief's checkpoint
in ``out_dir`` is where a re-run starts.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from tfbatch.errors import DependencyMissing, ModelError
from tfbatch.settings import Environment
from tfbatch.train.config import TrainConfig, TrainResult

log = logging.getLogger(__name__)

FORWARD_PREFIXES = ("AWS_", "TF_CPP_", "TFBATCH_")


def _worker_loop(config_json: dict[str, Any]) -> None:
    # Runs inside each Ray Train worker, with TF_CONFIG already set by TensorflowTrainer.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfbatch.train.trainer import run_worker

    run_worker(TrainConfig.model_validate(config_json))


def train_on_ray(config: TrainConfig, address: str | None = None, num_workers: int = 2, *,
                 cpus_per_worker: float = 1, gpus_per_worker: float = 0) -> TrainResult:
    """Train ``config`` with ``num_workers`` Ray Train workers; returns the chief's result.

    ``address``: a running cluster (else RAY_ADDRESS, else a local Ray started for the run).
    ``config.workers`` is set to ``num_workers`` so the saved config tells the truth.
    """
    try:
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.tensorflow import TensorflowTrainer
    except ImportError as exc:
        raise DependencyMissing("training on Ray needs Ray Train: pip install 'ray[train]'") from exc

    config = config.model_copy(update={"workers": num_workers, "out_dir": config.out_dir.resolve(),
                                       "data_dir": config.data_dir.resolve()})
    config.out_dir.mkdir(parents=True, exist_ok=True)
    config.result_path.unlink(missing_ok=True)
    (config.out_dir / "train-config.json").write_text(config.model_dump_json(indent=2))

    owns = not ray.is_initialized()
    if owns:
        address = address or os.environ.get("RAY_ADDRESS") or None
        env = {k: v for k, v in os.environ.items() if k.startswith(FORWARD_PREFIXES)}
        extra = {} if address else {"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=bool(Environment.read().ray_logs),
                 logging_level=logging.WARNING, **extra)
    try:
        resources = {"CPU": cpus_per_worker}
        if gpus_per_worker:
            resources["GPU"] = gpus_per_worker
        trainer = TensorflowTrainer(
            _worker_loop,
            train_loop_config=config.model_dump(mode="json"),
            scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=gpus_per_worker > 0,
                                         resources_per_worker=resources),
            run_config=RunConfig(name=f"tfbatch-train-{int(time.time())}",
                                 storage_path=str(config.out_dir / "ray")),
        )
        try:
            trainer.fit()
        except Exception as exc:  # TrainingFailedError wraps the worker's traceback
            raise ModelError(f"training on Ray with {num_workers} workers failed: {exc}") from exc
    finally:
        if owns:
            ray.shutdown()
    if not config.result_path.exists():
        raise ModelError(f"training on Ray finished but the chief wrote no {config.result_path}")
    return TrainResult.model_validate_json(config.result_path.read_text())
