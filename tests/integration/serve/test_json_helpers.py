"""JSON helper processes (tfbatch.tfs.json_helpers): real child processes write parts of large
answers; the bytes stay those of one encode whatever happens to a helper."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest
import requests

from tfbatch.runtime import jsonenc
from tfbatch.tfs import jsonstream
from tfbatch.tfs.codec import COLUMNAR, ROW, encode_predict
from tfbatch.tfs.json_helpers import JsonHelpers, auto_size

from .conftest import ServerProcess
from .test_streamed_json import _leave_mid_stream, make_wide_model

RNG = np.random.default_rng(11)
CHUNK = 50  # values per piece: many pieces, so every writer gets several


def outputs_of(dtype, shape) -> np.ndarray:
    values = RNG.standard_normal(shape) * 1000
    if np.dtype(dtype).kind == "b":
        return values > 0
    return values.astype(dtype)


def gone(pid: int, timeout: float = 30) -> bool:
    """Whether process ``pid`` ends within ``timeout`` (it need not be our child; a zombie counts)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def helpers(size: int, **kwargs) -> JsonHelpers:
    pool = JsonHelpers(size, min_share_values=CHUNK, **kwargs)
    assert pool.start(wait_s=60) == size, "helper processes did not start"
    return pool


@pytest.fixture(scope="module")
def two():
    pool = helpers(2)
    yield pool
    pool.close()


def chunks_of(value, pool) -> list[bytes]:
    plan = jsonstream.plan(value, CHUNK, helpers=pool)
    assert plan is not None
    return list(plan)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("shape", [(1, 5000), (700, 3), (3, 4, 250), (4001,)])
@pytest.mark.parametrize("fmt", [ROW, COLUMNAR])
def test_helpers_write_the_bytes_of_one_encode(two, dtype, shape, fmt):
    value = encode_predict({"y": outputs_of(dtype, shape)}, fmt, native=True)
    before = two.pieces_by_helpers
    assert b"".join(chunks_of(value, two)) == jsonenc.dumps(value)
    assert two.pieces_by_helpers > before  # the helpers wrote some of it, not this process alone


def test_non_finite_values_and_several_outputs(two):
    outputs = {"big": outputs_of(np.float32, (3, 500)), "ints": np.arange(1200, dtype=np.int64).reshape(3, 400) << 40,
               "nan": np.array([[np.nan, 1.5], [np.inf, -np.inf], [0.1, 2.0]], np.float32)}
    for fmt in (ROW, COLUMNAR):
        value = encode_predict(outputs, fmt, native=True)
        assert b"".join(chunks_of(value, two)) == jsonenc.dumps(value)


def test_a_busy_pool_leaves_the_next_answer_to_this_process():
    pool = helpers(1)
    try:
        value = {"a": outputs_of(np.float32, (20, 300))}
        first = iter(jsonstream.plan(value, CHUNK, helpers=pool))
        head = next(first) + next(first)  # '{"a":' then the array's first piece: the helper is lent now
        lent = pool.pieces_by_helpers
        assert b"".join(chunks_of(value, pool)) == jsonenc.dumps(value)
        assert pool.pieces_by_helpers == lent  # the second answer was written here alone
        assert head + b"".join(first) == jsonenc.dumps(value)
        assert pool.pieces_by_helpers > lent
    finally:
        pool.close()


def test_a_killed_helper_costs_its_process_and_nothing_else():
    pool = helpers(1)
    try:
        value = {"a": outputs_of(np.float64, (40, 300))}
        want = jsonenc.dumps(value)
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGSTOP)  # so that it dies having written nothing, whatever the socket could hold
        stream = iter(jsonstream.plan(value, CHUNK, helpers=pool))
        head = next(stream) + next(stream)  # '{"a":' then the array's first piece: the helper has its values
        os.kill(pid, signal.SIGKILL)
        assert gone(pid)
        assert head + b"".join(stream) == want
        assert pool.dropped == 1 and pool.pids() == []
        # The next answer starts a replacement in the background and does not wait for it.
        assert b"".join(chunks_of(value, pool)) == want
        assert pool.start(wait_s=60) == 1 and pool.pids() != [pid]
        before = pool.pieces_by_helpers
        assert b"".join(chunks_of(value, pool)) == want
        assert pool.pieces_by_helpers > before
    finally:
        pool.close()


def test_a_stalled_helper_is_dropped_after_its_timeout():
    pool = helpers(1, timeout_s=0.5)
    try:
        value = {"a": outputs_of(np.float32, (40, 300))}
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGSTOP)  # alive but silent: the socket read times out
        assert b"".join(chunks_of(value, pool)) == jsonenc.dumps(value)
        assert pool.dropped == 1
        assert gone(pid)  # killed, not left stopped
    finally:
        pool.close()


def test_an_abandoned_stream_gives_its_helper_back_and_the_next_answer_discards_what_it_owed():
    pool = helpers(1)
    try:
        value = {"a": outputs_of(np.float32, (40, 300))}
        want = jsonenc.dumps(value)
        (pid,) = pool.pids()
        stream = iter(jsonstream.plan(value, CHUNK, helpers=pool))
        next(stream), next(stream), next(stream)
        stream.close()  # as when the client goes away mid-answer
        before = pool.pieces_by_helpers
        assert b"".join(chunks_of(value, pool)) == want
        assert pool.pieces_by_helpers > before and pool.pids() == [pid] and pool.started == 1
    finally:
        pool.close()


def test_helpers_exit_when_the_pool_closes_or_the_server_dies(tmp_path):
    pool = helpers(2)
    pids = pool.pids()
    pool.close()
    assert all(gone(pid) for pid in pids)
    script = textwrap.dedent("""
        import os, sys
        from tfbatch.tfs.json_helpers import JsonHelpers
        pool = JsonHelpers(1)
        assert pool.start(wait_s=60) == 1
        print(pool.pids()[0], flush=True)
        os._exit(0)  # no close(): the helper must notice on its own
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert gone(int(out.stdout.split()[0]))


def test_small_answers_never_borrow():
    pool = JsonHelpers(1)  # the default share: 131,072 values per writer at least
    try:
        assert pool.start(wait_s=60) == 1
        value = {"a": outputs_of(np.float32, (2, 70_000))}  # 140,000 values: not worth a second writer
        assert b"".join(jsonstream.plan(value, helpers=pool)) == jsonenc.dumps(value)
        assert pool.pieces_by_helpers == 0
        value = {"a": outputs_of(np.float32, (4, 70_000))}
        assert b"".join(jsonstream.plan(value, helpers=pool)) == jsonenc.dumps(value)
        assert pool.pieces_by_helpers > 0
    finally:
        pool.close()


def test_a_client_leaving_mid_stream_gives_the_helpers_back(wide_dir):
    """The app as uvicorn calls it; the client is gone after the first body chunk."""
    import anyio

    from tests.support import asgi
    from tfbatch.handlers.service import InferenceService
    from tfbatch.runtime import ModelServer
    from tfbatch.serve.app import build_app
    from tfbatch.serve.settings import ServeSettings

    pool = helpers(1)
    local = ModelServer({"model": {1: wide_dir / "1"}})
    try:
        app = build_app(InferenceService(local), ServeSettings(), json_helpers=pool)
        body = b'{"instances": [1.0, 2.0, 3.0, 4.0]}'
        lent_mid_stream = []
        sent = anyio.run(lambda: asgi.call(app, "POST", "/invocations", body, leave_after_first=True,
                                           headers=[(b"content-type", b"application/json")],
                                           on_first_chunk=lambda: lent_mid_stream.append(pool.lent)))
        # anyio.run returns once the loop's executor, which closes the stream, has finished.
        assert sent[0]["status"] == 200 and lent_mid_stream == [1] and pool.lent == 0
        value = {"a": outputs_of(np.float32, (40, 300))}
        before = pool.pieces_by_helpers
        assert b"".join(chunks_of(value, pool)) == jsonenc.dumps(value)  # discards what it owed first
        assert pool.pieces_by_helpers > before and pool.dropped == 0
    finally:
        local.close()
        pool.close()


def test_auto_size():
    assert auto_size(1, cpus=1) == 0
    assert auto_size(1, cpus=2) == 1
    assert auto_size(2, cpus=2) == 0
    assert auto_size(1, cpus=16) == 3
    assert auto_size(4, cpus=16) == 3
    assert auto_size(8, cpus=16) == 1


@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("wide-helpers")
    make_wide_model(root / "1")
    return root


def test_a_server_writes_large_answers_with_its_helpers(wide_dir, tmp_path):
    srv = ServerProcess(wide_dir, tmp_path, "--json-helpers", "1").wait_ready()
    try:
        (helper,) = [p for p in psutil.Process(srv.proc.pid).children()
                     if "tfbatch.tfs.json_helpers" in " ".join(p.cmdline())]
        body = {"instances": [1.0, 2.5, -0.5, 3.0, 0.25, 7.0, 1.5, 2.0]}  # ~560,000 values per wide output
        from tfbatch.runtime import ModelServer
        from tfbatch.tfs.api import TfsApi

        local = ModelServer({"model": {1: wide_dir / "1"}})
        try:
            want = jsonenc.dumps(TfsApi(local).call("predict", body, "model"))
        finally:
            local.close()
        def large_answers(n: int) -> float:
            """The helper's CPU seconds over ``n`` large answers, each checked byte for byte."""
            cpu_before = sum(helper.cpu_times()[:2])
            for path in ("/invocations", "/v1/models/model:predict") * (n // 2):
                r = requests.post(f"{srv.url}{path}", data=json.dumps(body), timeout=120,
                                  headers={"Content-Type": "application/json"})
                assert r.status_code == 200 and r.content == want
            return sum(helper.cpu_times()[:2]) - cpu_before

        assert large_answers(4) > 0  # the helper did part of the writing
        for path in ("/invocations", "/v1/models/model:predict"):
            _leave_mid_stream(srv, path, keep=20_000)
        assert large_answers(4) > 0  # the abandoned answers gave the helper back
        helper.kill()
        assert gone(helper.pid)
        r = requests.post(f"{srv.url}/invocations", data=json.dumps(body), timeout=120,
                          headers={"Content-Type": "application/json"})
        assert r.status_code == 200 and r.content == want
        assert "JSON helper process %d dropped" % helper.pid in srv.output()
        replacements = [p.pid for p in psutil.Process(srv.proc.pid).children()
                        if "tfbatch.tfs.json_helpers" in " ".join(p.cmdline())]
    finally:
        assert srv.stop() == 0, srv.output()
    assert "Traceback" not in srv.output()
    assert all(gone(pid) for pid in replacements)  # no helper outlives its server
