"""The SageMaker bring-your-own-container entrypoint: ``docker run IMAGE serve``.

SageMaker starts the image with the argument ``serve`` and speaks to it on port 8080 (or
``SAGEMAKER_BIND_TO_PORT``): ``GET /ping``, ``POST /invocations``, and for Batch Transform
``GET /execution-parameters``. The model is unpacked in ``/opt/ml/model`` (``SM_MODEL_DIR``
overrides it). Ports other than the HTTP one must come from ``SAGEMAKER_SAFE_PORT_RANGE``
("low-high"), so gRPC takes the range's first port. Batching follows the ``SAGEMAKER_TFS_*``
variables as in the TFS container, worker processes ``SAGEMAKER_GUNICORN_WORKERS``.

The container listens on every interface (SageMaker reaches it from outside its network
namespace); without a token that is the platform's design, so no warning is printed. Any
``tfbatch serve`` flag after ``serve`` still applies and wins over the environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

DEFAULT_MODEL_DIR = "/opt/ml/model"
DEFAULT_GRPC_PORT = 9000


def _safe_port(env: Mapping[str, str]) -> int:
    text = env.get("SAGEMAKER_SAFE_PORT_RANGE", "").strip()
    if not text:
        return DEFAULT_GRPC_PORT
    low, sep, high = text.partition("-")
    try:
        low_port, high_port = int(low), int(high if sep else low)
    except ValueError:
        raise SystemExit(f"SAGEMAKER_SAFE_PORT_RANGE={text!r}: expected 'LOW-HIGH', e.g. '10000-10999'") from None
    if not 0 < low_port <= high_port <= 65535:
        raise SystemExit(f"SAGEMAKER_SAFE_PORT_RANGE={text!r}: expected 0 < LOW <= HIGH <= 65535")
    return low_port


def container_argv(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """The ``tfbatch serve`` command line the container's environment amounts to."""
    if argv and argv[0] == "serve":
        argv = argv[1:]
    elif argv and not argv[0].startswith("-"):
        raise SystemExit(f"this image serves models: run it with 'serve', not {argv[0]!r}")
    model = env.get("SM_MODEL_DIR") or DEFAULT_MODEL_DIR
    derived = [
        model,
        "--host", env.get("TFBATCH_SERVE_HOST", "0.0.0.0"),
        "--grpc-port", str(_safe_port(env)),
        "--insecure",
    ]
    workers = env.get("SAGEMAKER_GUNICORN_WORKERS", "").strip()
    if workers:
        derived += ["--workers", workers]
    # Later flags win in argparse: the user's own flags override what the environment says.
    return derived + list(argv)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    from tfbatch.serve.cli import add_serve_arguments, serve_main

    env = os.environ if env is None else env
    args = container_argv(sys.argv[1:] if argv is None else argv, env)
    p = argparse.ArgumentParser(prog="serve", description="SageMaker container entrypoint for tfbatch serve")
    add_serve_arguments(p)
    return serve_main(p.parse_args(args))


if __name__ == "__main__":
    sys.exit(main())
