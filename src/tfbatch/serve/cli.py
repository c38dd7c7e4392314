"""``tfbatch serve MODEL``: flags -> ServeSettings -> run_server. Parsed on call, never at import."""

from __future__ import annotations

import argparse
import os

from tfbatch.limits import MAX_BODY_MB


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model.tar.gz or model directory (path or URI)")
    p.add_argument("--host", help="bind address (default 127.0.0.1; 0.0.0.0 for all interfaces)")
    p.add_argument("--port", type=int, help="HTTP port (default SAGEMAKER_BIND_TO_PORT or 8080; 0 = any free)")
    p.add_argument("--grpc-port", type=int, help="TF Serving gRPC port (default 9000; 0 = any free; -1 = off)")
    p.add_argument("--workers", type=int, help="worker processes sharing the ports (default 1)")
    p.add_argument("--auth-token", help="require 'Authorization: Bearer TOKEN' on every route but /ping, every "
                   "gRPC call but health, and on the loopback TFS endpoints from any process but this job's own "
                   "(default TFBATCH_AUTH_TOKEN; visible in ps: prefer --auth-token-file)")
    p.add_argument("--auth-token-file", help="read the token from this file (default TFBATCH_AUTH_TOKEN_FILE)")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="accept serving a non-loopback address without a token, without the warning")
    p.add_argument("--max-body-mb", type=float, help="request body limit; larger bodies get 413 (default %d)" % MAX_BODY_MB)
    p.add_argument("--sagemaker-body-limit", action="store_true",
                   help="strict mode: SageMaker Runtime's 6 MB body limit (413 above it)")
    p.add_argument("--max-request-mb", type=float,
                   help="what one request's input tensors may decode to, checked before allocating (default %d)" % MAX_BODY_MB)
    p.add_argument("--max-connections", type=int, help="HTTP connections + requests in progress before 503 "
                   "(default 1024)")
    p.add_argument("--header-timeout", type=float, dest="header_timeout_s",
                   help="seconds a request's headers may take to arrive before the connection closes (default 10)")
    p.add_argument("--body-timeout", type=float, dest="body_timeout_s",
                   help="seconds a request body may stall before 408 (default 30)")
    p.add_argument("--keep-alive-timeout", type=float, dest="keep_alive_s",
                   help="seconds an idle kept-alive connection stays open (default 75)")
    p.add_argument("--grpc-max-concurrent-rpcs", type=int,
                   help="gRPC calls running + queued before RESOURCE_EXHAUSTED (default 2 x gRPC threads)")
    p.add_argument("--request-timeout", type=float, dest="request_timeout_s",
                   help="seconds before a request is answered 504 (default 60)")
    p.add_argument("--graceful-timeout", type=float, dest="graceful_timeout_s",
                   help="seconds to finish in-flight requests on shutdown (default 30)")
    p.add_argument("--grpc-max-message-mb", type=float, help="gRPC message size limit (default: --max-body-mb)")
    p.add_argument("--json-helpers", type=int,
                   help="processes per worker that write parts of large JSON answers (default TFBATCH_JSON_HELPERS, "
                        "else the cores a worker has beyond its own, at most 3; 0 = none)")
    p.add_argument("--enable-batching", action="store_true", default=None,
                   help="coalesce concurrent requests into model batches (SAGEMAKER_TFS_ENABLE_BATCHING)")
    p.add_argument("--max-batch-size", type=int, help="SAGEMAKER_TFS_MAX_BATCH_SIZE")
    p.add_argument("--batch-timeout-micros", type=int, help="SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS")
    p.add_argument("--num-batch-threads", type=int, help="SAGEMAKER_TFS_NUM_BATCH_THREADS")
    p.add_argument("--batching-parameters-file", type=_absolute,
                   help="TF Serving BatchingParameters text proto; turns batching on and wins over the batching "
                        "flags and SAGEMAKER_TFS_* variables (TFBATCH_BATCHING_PARAMETERS_FILE; docs/serving.md)")
    p.add_argument("--model-version-policy",
                   help="versions to serve: latest, latest:N, specific:V1,V2 or all "
                        "(TFBATCH_MODEL_VERSION_POLICY; default: every version in the artifact)")
    p.add_argument("--model-poll-seconds", type=float, dest="model_poll_interval_s",
                   help="scan model folders for new versions this often and hot-reload them; 0 = off "
                        "(TFBATCH_MODEL_POLL_SECONDS)")
    p.add_argument("--warmup-replays", type=int,
                   help="times each assets.extra/tf_serving_warmup_requests record is replayed (default 1; "
                        "TFBATCH_WARMUP_REPLAYS)")
    p.add_argument("--install-requirements", action="store_true", default=None,
                   help="pip-install code/requirements.txt before loading code/inference.py")
    p.add_argument("--ready-file", help="write {port, grpc_port, ...} JSON here once serving")
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"],
                   help="server log level (default info)")
    p.add_argument("--log-format", choices=["plain", "json"],
                   help="plain lines or one JSON object per line (access log fields included)")


_RUNTIME_FLAGS = ("enable_batching", "max_batch_size", "batch_timeout_micros", "num_batch_threads",
                  "batching_parameters_file", "model_version_policy", "model_poll_interval_s", "warmup_replays")
_SERVE_FLAGS = ("host", "port", "grpc_port", "workers", "auth_token", "auth_token_file", "insecure", "max_body_mb",
                "max_request_mb", "request_timeout_s", "graceful_timeout_s", "grpc_max_message_mb",
                "grpc_max_concurrent_rpcs", "max_connections", "header_timeout_s", "body_timeout_s",
                "keep_alive_s", "install_requirements", "log_level", "log_format", "json_helpers")


def _absolute(path: str) -> str:
    # Worker processes may start elsewhere; a relative path would name another file there.
    return os.path.abspath(path)


def settings_from_args(args: argparse.Namespace, env=None):
    from tfbatch.serve.settings import ServeSettings

    runtime = {k: getattr(args, k) for k in _RUNTIME_FLAGS if getattr(args, k, None) is not None}
    overrides = {k: getattr(args, k, None) for k in _SERVE_FLAGS}
    if getattr(args, "sagemaker_body_limit", False):
        from tfbatch.serve.settings import SAGEMAKER_MAX_BODY_MB

        overrides["max_body_mb"] = SAGEMAKER_MAX_BODY_MB
    return ServeSettings.from_env(env, runtime=runtime, **overrides)


def serve_main(args: argparse.Namespace) -> int:
    import logging

    from tfbatch.serve.server import run_server

    settings = settings_from_args(args)
    from tfbatch.serve.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if settings.exposed_without_auth:
        logging.getLogger("tfbatch.serve").warning(
            "serving %s without an auth token: anyone who can reach it can call the model; set "
            "--auth-token-file or TFBATCH_AUTH_TOKEN, or pass --insecure to accept this", settings.host,
        )
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
