"""RuntimeSettings from SAGEMAKER_TFS_* variables: defaults, parsing, errors naming the variable."""

from __future__ import annotations

import os

import pytest

from tfbatch import errors
from tfbatch.runtime import RuntimeSettings


def test_defaults_match_sagemaker_container():
    s = RuntimeSettings.from_env({})
    assert s.enable_batching is False
    assert s.max_batch_size == 8
    assert s.batch_timeout_micros == 1000
    assert s.num_batch_threads == (os.cpu_count() or 1)
    assert s.max_enqueued_batches == (os.cpu_count() or 1)
    assert s.intra_op_parallelism is None and s.inter_op_parallelism is None
    assert s.default_model_name is None


def test_reads_every_variable():
    env = {
        "SAGEMAKER_TFS_ENABLE_BATCHING": "True",
        "SAGEMAKER_TFS_MAX_BATCH_SIZE": "32",
        "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS": "5000",
        "SAGEMAKER_TFS_NUM_BATCH_THREADS": "3",
        "SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES": "7",
        "SAGEMAKER_TFS_INTRA_OP_PARALLELISM": "2",
        "SAGEMAKER_TFS_INTER_OP_PARALLELISM": "1",
        "SAGEMAKER_TFS_DEFAULT_MODEL_NAME": "resnet",
    }
    s = RuntimeSettings.from_env(env)
    assert (s.enable_batching, s.max_batch_size, s.batch_timeout_micros) == (True, 32, 5000)
    assert (s.num_batch_threads, s.max_enqueued_batches) == (3, 7)
    assert (s.intra_op_parallelism, s.inter_op_parallelism) == (2, 1)
    assert s.default_model_name == "resnet"
    assert s.batch_timeout_s == pytest.approx(0.005)
    assert s.max_queued_rows == 7 * 32


def test_batch_job_raises_queue_bound_unless_set():
    assert RuntimeSettings.from_env({"SAGEMAKER_BATCH": "true"}).max_enqueued_batches == 100_000_000
    s = RuntimeSettings.from_env({"SAGEMAKER_BATCH": "true", "SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES": "4"})
    assert s.max_enqueued_batches == 4


def test_overrides_win_over_env():
    s = RuntimeSettings.from_env({"SAGEMAKER_TFS_MAX_BATCH_SIZE": "32"}, max_batch_size=4)
    assert s.max_batch_size == 4


@pytest.mark.parametrize(
    "var,value",
    [
        ("SAGEMAKER_TFS_MAX_BATCH_SIZE", "eight"),
        ("SAGEMAKER_TFS_MAX_BATCH_SIZE", "0"),
        ("SAGEMAKER_TFS_ENABLE_BATCHING", "maybe"),
        ("SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS", "-1"),
        ("SAGEMAKER_TFS_NUM_BATCH_THREADS", "1.5"),
    ],
)
def test_bad_values_name_the_variable(var, value):
    with pytest.raises(errors.JobSpecError, match=var):
        RuntimeSettings.from_env({var: value})


def test_bad_override_names_the_variable():
    with pytest.raises(errors.JobSpecError, match="SAGEMAKER_TFS_MAX_BATCH_SIZE"):
        RuntimeSettings.from_env({}, max_batch_size=0)
