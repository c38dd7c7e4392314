"""CPU of one ``requests.post(context.rest_uri, data=...)`` answered in process (a single
handler's model call, ``handlers/local_rest.py``), split into its steps, on the calling thread.

    python -m benchmarks.transform.profile.local_post_cost --model-dir SAVEDMODEL [--calls 3000]
        [--requests-side]

The body is one CSV line's request (``{"instances": [[32 floats]]}``, what the bench's
``csv-handler-single`` sends per call) or, with ``--rows N``, N such rows. Each step is timed on
the thread's CPU clock (``time.thread_time_ns``), so the model's batcher thread and TensorFlow's
threads are not counted; ``whole`` is the call as a script makes it. The ``ModelServer`` here
has its default settings, which batch nothing: the model runs on the calling thread and is part
of ``_answer``'s figure (in a job the batcher's thread runs it for a hop's calls together), so
``whole`` less ``_answer`` is the ``requests`` side of the call. ``--requests-side`` times that
side alone instead: ``requests.post`` with the in-process answer replaced by a constant one
(handler-calls.md), 20,000 calls, three times.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from pathlib import Path

import numpy as np


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="a SavedModel taking [None, 32] floats")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--requests-side", action="store_true")
    args = parser.parse_args()

    import requests

    from tfbatch.handlers import local_rest
    from tfbatch.handlers.service import InferenceService
    from tfbatch.runtime import ModelServer
    from tfbatch.runtime import jsonenc

    server = ModelServer({"model": {1: args.model_dir}})
    port = _free_port()
    service = InferenceService(server, None, rest_port=port)
    local_rest.register(port, service)
    url = f"http://localhost:{port}/v1/models/model:predict"
    rng = np.random.default_rng(0)
    bodies = [jsonenc.dumps_like_stdlib({"instances": rng.random((args.rows, 32)).round(6).tolist()})
              for _ in range(64)]
    for body in bodies[:8]:  # warm: the model's first calls, the batcher's threads
        requests.post(url, data=body)

    def clocked(call) -> float:
        started = time.thread_time_ns()
        for n in range(args.calls):
            call(bodies[n % len(bodies)])
        return (time.thread_time_ns() - started) / args.calls / 1e3

    if args.requests_side:
        local_rest._answer = lambda *a, **k: (200, b'{"predictions": [[0.5]]}')  # this process only
        args.calls = 20_000
        for _ in range(3):
            print(f"requests side of requests.post     {clocked(lambda body: requests.post(url, data=body)):8.2f} us "
                  "a call (thread CPU)")
        server.close()
        return
    path = "/v1/models/model:predict"
    steps = {
        "whole: requests.post": lambda body: requests.post(url, data=body).content,
        "service_for(url)": lambda body: local_rest.service_for(url),
        "_answer (parse, model here, encode)": lambda body: local_rest._answer(service, "POST", path, body.encode(),
                                                                          sent=body),
        "make_response": lambda body: __import__("tfbatch.handlers.service", fromlist=["x"]).make_response(
            200, b'{"predictions": [[0.5]]}', url),
        "json.loads of the answer": lambda body: json.loads(b'{"predictions": [[0.5, 0.25]]}'),
    }
    for name, call in steps.items():
        print(f"{name:34s} {clocked(call):8.2f} us a call (thread CPU)")
    server.close()


if __name__ == "__main__":
    main()
