"""``tfbatch api``'s flags and the operation registry, without starting anything."""

from __future__ import annotations

import pytest

from tfbatch.apiserver import registry
from tfbatch.apiserver.config import ApiConfig
from tfbatch.cli import build_parser
from tfbatch.errors import ConfigError


def _config(*argv: str) -> ApiConfig:
    from tfbatch.apiserver.cli import config_from_args

    return config_from_args(build_parser().parse_args(["api", *argv]))


def test_defaults_bind_loopback_and_flags_reach_the_config(tmp_path):
    config = _config()
    assert (config.host, config.port, config.engine, config.max_concurrent_jobs) == ("127.0.0.1", 8000, "local", 2)
    config = _config("--port", "9001", "--state-dir", str(tmp_path), "--engine", "ray", "--ray-address", "h:6379",
                     "--max-concurrent-jobs", "3", "--max-jobs-in-progress", "7",
                     "--region", "eu-west-1")
    assert (config.port, config.state_dir, config.engine, config.ray_address) == (9001, tmp_path, "ray", "h:6379")
    assert (config.max_concurrent_jobs, config.max_jobs_in_progress, config.region) == (3, 7, "eu-west-1")


def test_credentials_file_is_read_and_bad_lines_never_echo_the_secret(tmp_path):
    good = tmp_path / "creds"
    good.write_text("# accepted keys\nAKIDONE secret-one\n\nAKIDTWO secret-two\n")
    config = _config("--credentials-file", str(good))
    assert config.accepted_credentials() == {"AKIDONE": "secret-one", "AKIDTWO": "secret-two"}
    bad = tmp_path / "bad"
    bad.write_text("AKIDONE secret-one extra-secret-word\n")
    with pytest.raises(ConfigError) as info:
        _config("--credentials-file", str(bad))
    assert "bad:1" in str(info.value) and "secret-one" not in str(info.value)
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no credentials"):
        _config("--credentials-file", str(empty))


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="--max-concurrent-jobs"):
        ApiConfig(max_concurrent_jobs=0)
    with pytest.raises(ConfigError, match="12 digits"):
        ApiConfig(account_id="123")


def test_an_operation_registered_twice_is_refused_and_arns_lowercase_names():
    def first(ctx, params):
        return {}

    def second(ctx, params):
        return {}

    registry.operation("sagemaker", "TestOnlyOperation")(first)
    try:
        with pytest.raises(RuntimeError, match="registered twice"):
            registry.operation("sagemaker", "TestOnlyOperation")(second)
        assert registry.handler_for("sagemaker", "TestOnlyOperation") is first
    finally:
        registry._OPERATIONS.pop(("sagemaker", "TestOnlyOperation"), None)
    ctx = registry.Context(state=None, config=ApiConfig())
    assert ctx.arn("transform-job", "My-Job") == "arn:aws:sagemaker:us-east-1:000000000000:transform-job/my-job"
