"""NumPy's OpenBLAS gets one thread in tfbatch's processes unless the environment names a count."""

from __future__ import annotations

import pytest

from tfbatch.handlers.pool import worker_env
from tfbatch.runtime.blas import BLAS_THREAD_VARS, one_blas_thread


def test_one_thread_where_the_environment_names_no_count():
    assert one_blas_thread({}) == {"OPENBLAS_NUM_THREADS": "1"}
    assert one_blas_thread({"PATH": "/bin", "TF_NUM_INTRAOP_THREADS": "4"}) == {"OPENBLAS_NUM_THREADS": "1"}


@pytest.mark.parametrize("name", BLAS_THREAD_VARS)
def test_a_count_the_user_set_is_kept(name):
    assert one_blas_thread({name: "8"}) == {}
    env = worker_env({name: "8"})
    assert env[name] == "8" and env.get("OPENBLAS_NUM_THREADS", "8") == "8"


def test_a_handler_worker_process_gets_one_thread_and_no_gpu():
    assert worker_env({"PATH": "/bin"}) == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "-1", "OPENBLAS_NUM_THREADS": "1"}
