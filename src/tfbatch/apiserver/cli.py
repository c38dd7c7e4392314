"""``tfbatch api``: SageMaker's control plane, SageMaker Runtime and CloudWatch Logs on one port."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path

from tfbatch.errors import ConfigError


def add_api_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--state-dir", default=".tfbatch-api",
                   help="folder for the SQLite state (models, jobs, endpoints, logs); default ./.tfbatch-api")
    p.add_argument("--engine", choices=("local", "ray"), default="local", help="where transform jobs run")
    p.add_argument("--ray-address", default=None, help="Ray cluster address for --engine ray")
    p.add_argument("--max-concurrent-jobs", type=int, default=2,
                   help="transform jobs running at once; later ones wait InProgress (default 2)")
    p.add_argument("--max-jobs-in-progress", type=int, default=100,
                   help="jobs running or queued at most; CreateTransformJob beyond it is ResourceLimitExceeded "
                   "(default 100)")
    p.add_argument("--region", default=None, help="region in ARNs (default: AWS_REGION, else us-east-1)")
    p.add_argument("--credentials-file", default=None,
                   help="file of 'ACCESS_KEY_ID SECRET' lines accepted for SigV4; default: the server's "
                   "own AWS credentials (botocore's chain)")


def _read_credentials(path: str | None) -> list[tuple[str, str]]:
    if path is None:
        return []
    pairs = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            # The line itself is not quoted: it holds a secret.
            raise ConfigError(f"{path}:{n}: expected 'ACCESS_KEY_ID SECRET', got {len(parts)} fields")
        pairs.append((parts[0], parts[1]))
    if not pairs:
        raise ConfigError(f"{path}: no credentials in it (expected 'ACCESS_KEY_ID SECRET' lines)")
    return pairs


def config_from_args(args: argparse.Namespace):
    from tfbatch.apiserver.config import ApiConfig

    return ApiConfig(host=args.host, port=args.port, state_dir=Path(args.state_dir).resolve(), engine=args.engine,
                     ray_address=args.ray_address, max_concurrent_jobs=args.max_concurrent_jobs,
                     max_jobs_in_progress=args.max_jobs_in_progress,
                     region=args.region or ApiConfig.region_from_env(),
                     credentials=_read_credentials(args.credentials_file))


def api_main(args: argparse.Namespace) -> int:
    import uvicorn

    from tfbatch.apiserver.app import build_app

    config = config_from_args(args)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.getLogger("tfbatch.apiserver").setLevel(logging.INFO)
    app = build_app(config)
    # uvicorn re-raises the signal that stopped it after its graceful shutdown (running jobs
    # handed back to the state as InProgress, endpoints stopped); under the default handler
    # that would end the process by the signal instead of with status 0.
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "api",
        help="SageMaker's API served locally: boto3 and SageMaker SDK code runs jobs here",
        description="Serve SageMaker (JSON 1.1), SageMaker Runtime (InvokeEndpoint) and CloudWatch Logs "
        "on one port, SigV4-signed, state in SQLite under --state-dir. Point AWS_ENDPOINT_URL_SAGEMAKER, "
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME and AWS_ENDPOINT_URL_CLOUDWATCH_LOGS at it.",
    )
    add_api_arguments(p)
    p.set_defaults(func=api_main)
    return p
