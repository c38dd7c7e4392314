"""tfbatch.settings: one boolean parser, one mapping of the environment tfbatch reads."""

from __future__ import annotations

import pytest

from tfbatch.errors import ConfigError
from tfbatch.settings import Environment, EnvironmentValues, parse_bool


@pytest.mark.parametrize("text", ["true", "True", " 1 ", "yes", "ON"])
def test_parse_bool_true(text):
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["false", "FALSE", "0", "no", "off", "", "  "])
def test_parse_bool_false(text):
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["maybe", "2", "tru", "y"])
def test_parse_bool_refuses_anything_else(text):
    with pytest.raises(ValueError, match="expected true or false"):
        parse_bool(text)


def test_reads_a_given_mapping_not_the_process(monkeypatch):
    monkeypatch.setenv("TFBATCH_RAY_REMOTE_READ", "1")
    env = Environment.read({"SAGEMAKER_TFS_MAX_BATCH_SIZE": "32", "SAGEMAKER_BATCH": "true", "OTHER": "x"})
    assert env.max_batch_size == 32 and env.batch_job is True
    assert env.ray_remote_read is None
    assert env.given("max_batch_size", "enable_batching", "ray_remote_read") == {"max_batch_size": 32}


def test_reads_the_process_environment(monkeypatch):
    monkeypatch.setenv("TFBATCH_RAY_REMOTE_READ", "yes")
    monkeypatch.setenv("TFBATCH_RAY_CPUS_PER_INSTANCE", "0.5")
    monkeypatch.setenv("SAGEMAKER_BIND_TO_PORT", " ")
    env = Environment.read()
    assert env.ray_remote_read is True and env.ray_cpus_per_instance == 0.5
    assert env.port is None  # blank means not set


@pytest.mark.parametrize(
    "var,value,expected",
    [
        ("SAGEMAKER_TFS_ENABLE_BATCHING", "maybe", "expected true or false"),
        ("SAGEMAKER_TFS_MAX_BATCH_SIZE", "0", "expected an integer >= 1"),
        ("SAGEMAKER_TFS_NUM_BATCH_THREADS", "1.5", "expected an integer"),
        ("SAGEMAKER_BIND_TO_PORT", "70000", "<= 65535"),
        ("TFBATCH_RAY_GPUS_PER_INSTANCE", "-1", "expected a number >= 0"),
        ("TFBATCH_LEDGER_GROUP", "0", "expected an integer >= 1"),
        ("TFBATCH_LEDGER_INTERVAL_S", "0", "expected a number > 0"),
        ("TFBATCH_LEDGER_INTERVAL_S", "soon", "expected a number"),
    ],
)
def test_bad_value_names_variable_value_and_expectation(var, value, expected):
    with pytest.raises(ConfigError) as info:
        Environment.read({var: value})
    message = str(info.value)
    assert f"environment variable {var}={value!r}" in message and expected in message


def test_ledger_group_commit_variables():
    env = Environment.read({"TFBATCH_LEDGER_GROUP": "8", "TFBATCH_LEDGER_INTERVAL_S": "0.25"})
    assert env.ledger_group == 8 and env.ledger_interval_s == 0.25
    assert Environment.read({}).ledger_group is None


def test_variable_of_a_field():
    assert EnvironmentValues.variable("max_batch_size") == "SAGEMAKER_TFS_MAX_BATCH_SIZE"
    assert EnvironmentValues.variable("not_a_field") == "not_a_field"
