"""Handler worker processes take their limits from the build_stack call that started them.

The script sends 200 KB over ``context.channel`` with a 64 KiB cap. A worker whose channel has
that cap refuses to send it ("Sent message larger than max"); a worker left on the default
100 MB cap sends it, and only the loopback server refuses it on receipt, which the error
names differently. So the answer tells which cap the worker's own channel has.
"""

from __future__ import annotations

from tfbatch.handlers.pool import HandlerPool
from tfbatch.handlers.pooled import PooledService, models_init
from tfbatch.handlers.service import InvocationRequest
from tfbatch.handlers.stack import build_stack
from tfbatch.testing.models import make_linear_model

SCRIPT = '''
import grpc


def handler(data, context):
    call = context.channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
    try:
        call(b"\\0" * 200_000, timeout=60)
    except grpc.RpcError as err:
        return "%s: %s" % (err.code().name, err.details()), "text/plain"
    return "sent", "text/plain"
'''

CAP = 64 * 1024


def test_handler_workers_use_the_message_cap_build_stack_was_given(tmp_path):
    root = tmp_path / "artifact"
    make_linear_model(root / "1")
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text(SCRIPT)
    pools: list[HandlerPool] = []
    stack = build_stack(str(root), grpc_max_message_bytes=CAP,
                        on_script=lambda handlers, init: pools.append(HandlerPool(init, 1).start()))
    try:
        (pool,) = pools
        pool.set_models(models_init(stack.service))
        response = PooledService(stack.service, pool).invoke(InvocationRequest(body=b"{}"))
        answer = response.body.decode()
        assert response.status == 200, answer
        assert answer.startswith("RESOURCE_EXHAUSTED"), answer
        assert f"Sent message larger than max (200000 vs. {CAP})" in answer, answer
    finally:
        for pool in pools:
            pool.close()
        stack.close()
