"""A job's Environment SAGEMAKER_TFS_MAX_BATCH_SIZE fixes its batch size, as the TFS container's does."""

from __future__ import annotations

import pytest

from tfbatch.errors import ConfigError
from tfbatch.transform.spec import TransformSpec


def _spec(tmp_path, **fields):
    return TransformSpec.build(model=str(tmp_path / "m"), input=str(tmp_path / "in"), output=str(tmp_path / "out"),
                               **fields)


def test_environment_batch_size_is_used_and_not_tuned(tmp_path):
    spec = _spec(tmp_path, env={"SAGEMAKER_TFS_MAX_BATCH_SIZE": "3"})
    assert spec.max_batch_size == 3
    assert spec.autotune is False


def test_the_flag_wins_over_the_environment(tmp_path):
    spec = _spec(tmp_path, env={"SAGEMAKER_TFS_MAX_BATCH_SIZE": "3"}, max_batch_size=5)
    assert spec.max_batch_size == 5


def test_without_it_the_batch_size_is_tuned(tmp_path):
    spec = _spec(tmp_path)
    assert spec.autotune is True


@pytest.mark.parametrize("raw", ["0", "x", "-2", ""])
def test_a_bad_value_names_the_variable(tmp_path, raw):
    with pytest.raises(ConfigError, match="SAGEMAKER_TFS_MAX_BATCH_SIZE"):
        _spec(tmp_path, env={"SAGEMAKER_TFS_MAX_BATCH_SIZE": raw})
