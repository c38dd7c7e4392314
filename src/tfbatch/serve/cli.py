"""``tfbatch serve MODEL``: flags -> ServeSettings -> run_server. Parsed on call, never at import."""

from __future__ import annotations

import argparse
import os


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model.tar.gz or model directory (path or URI)")
    p.add_argument("--host", help="bind address (default 127.0.0.1; 0.0.0.0 for all interfaces)")
    p.add_argument("--port", type=int, help="HTTP port (default SAGEMAKER_BIND_TO_PORT or 8080; 0 = any free)")
    p.add_argument("--grpc-port", type=int, help="TF Serving gRPC port (default 9000; 0 = any free; -1 = off)")
    p.add_argument("--workers", type=int, help="worker processes sharing the ports (default 1)")
    p.add_argument("--auth-token", help="require 'Authorization: Bearer TOKEN' on every route but /ping "
                   "(default TFBATCH_AUTH_TOKEN)")
    p.add_argument("--max-body-mb", type=float, help="request body limit; larger bodies get 413 (default 100)")
    p.add_argument("--request-timeout", type=float, dest="request_timeout_s",
                   help="seconds before a request is answered 504 (default 60)")
    p.add_argument("--graceful-timeout", type=float, dest="graceful_timeout_s",
                   help="seconds to finish in-flight requests on shutdown (default 30)")
    p.add_argument("--grpc-max-message-mb", type=int, help="gRPC message size limit (default 512)")
    p.add_argument("--enable-batching", action="store_true", default=None,
                   help="coalesce concurrent requests into model batches (SAGEMAKER_TFS_ENABLE_BATCHING)")
    p.add_argument("--max-batch-size", type=int, help="SAGEMAKER_TFS_MAX_BATCH_SIZE")
    p.add_argument("--batch-timeout-micros", type=int, help="SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS")
    p.add_argument("--num-batch-threads", type=int, help="SAGEMAKER_TFS_NUM_BATCH_THREADS")
    p.add_argument("--install-requirements", action="store_true", default=None,
                   help="pip-install code/requirements.txt before loading code/inference.py")
    p.add_argument("--ready-file", help="write {port, grpc_port, ...} JSON here once serving")
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"],
                   help="server log level (default info)")


_RUNTIME_FLAGS = ("enable_batching", "max_batch_size", "batch_timeout_micros", "num_batch_threads")
_SERVE_FLAGS = ("host", "port", "grpc_port", "workers", "auth_token", "max_body_mb", "request_timeout_s",
                "graceful_timeout_s", "grpc_max_message_mb", "install_requirements", "log_level")


def settings_from_args(args: argparse.Namespace, env=None):
    from tfbatch.serve.settings import ServeSettings

    runtime = {k: getattr(args, k) for k in _RUNTIME_FLAGS if getattr(args, k, None) is not None}
    overrides = {k: getattr(args, k, None) for k in _SERVE_FLAGS}
    return ServeSettings.from_env(env, runtime=runtime, **overrides)


def serve_main(args: argparse.Namespace) -> int:
    import logging

    from tfbatch.serve.server import run_server

    settings = settings_from_args(args)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return run_server(args.model, settings, ready_file=args.ready_file)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve",
        help="real-time endpoint: SageMaker TFS container routes, TF Serving REST and gRPC",
        description="Serve a model artifact over HTTP (/ping, /invocations, /endpoints/<name>/invocations, "
        "/v1/models/..., /metrics) and TF Serving gRPC.",
    )
    add_serve_arguments(p)
    p.set_defaults(func=serve_main)
    return p
