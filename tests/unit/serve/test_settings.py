"""Serve settings: where the token comes from, what is refused, when to warn, body limits."""

from __future__ import annotations

import argparse

import pytest

from tfbatch.errors import ConfigError
from tfbatch.serve.cli import add_serve_arguments, settings_from_args
from tfbatch.serve.settings import ServeSettings


def _settings(argv, env=None):
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return settings_from_args(p.parse_args(["model", *argv]), env or {})


def test_token_from_a_file_or_the_environment(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert _settings(["--auth-token-file", str(token_file)]).auth_token == "from-file"
    assert _settings([], {"TFBATCH_AUTH_TOKEN_FILE": str(token_file)}).auth_token == "from-file"
    assert _settings([], {"TFBATCH_AUTH_TOKEN": "from-env"}).auth_token == "from-env"
    # A flag wins over the environment.
    assert _settings(["--auth-token-file", str(token_file)], {"TFBATCH_AUTH_TOKEN": "x"}).auth_token == "from-file"


@pytest.mark.parametrize("how", ["flag", "env", "file"])
def test_an_empty_token_is_refused_not_taken_as_no_auth(tmp_path, how):
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    argv, env = {
        "flag": (["--auth-token", ""], {}),
        "env": ([], {"TFBATCH_AUTH_TOKEN": ""}),
        "file": (["--auth-token-file", str(empty)], {}),
    }[how]
    with pytest.raises(ConfigError, match="empty"):
        _settings(argv, env)


def test_a_missing_token_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="no-such-file"):
        _settings(["--auth-token-file", str(tmp_path / "no-such-file")])


@pytest.mark.parametrize(
    "host, token, insecure, warn",
    [
        ("127.0.0.1", None, False, False),
        ("::1", None, False, False),
        ("localhost", None, False, False),
        ("0.0.0.0", None, False, True),
        ("10.1.2.3", None, False, True),
        ("0.0.0.0", "tok", False, False),
        ("0.0.0.0", None, True, False),
    ],
)
def test_exposed_without_auth(host, token, insecure, warn):
    assert ServeSettings(host=host, auth_token=token, insecure=insecure).exposed_without_auth is warn


def test_body_limits_and_grpc_message_limit_agree():
    default = _settings([])
    assert default.grpc_max_message_bytes == default.max_body_bytes == 100 * 1024 * 1024
    strict = _settings(["--sagemaker-body-limit"])
    assert strict.max_body_bytes == strict.grpc_max_message_bytes == 6 * 1024 * 1024
    assert _settings(["--max-body-mb", "2", "--grpc-max-message-mb", "3"]).grpc_max_message_bytes == 3 * 1024 * 1024


def test_connection_limits_reach_the_settings():
    s = _settings(["--max-connections", "50", "--header-timeout", "2.5", "--body-timeout", "4",
                   "--keep-alive-timeout", "9", "--grpc-max-concurrent-rpcs", "7", "--max-request-mb", "3",
                   "--log-format", "json"])
    assert (s.max_connections, s.header_timeout_s, s.body_timeout_s, s.keep_alive_s) == (50, 2.5, 4, 9)
    assert s.grpc_max_concurrent_rpcs == 7 and s.max_request_bytes == 3 * 1024 * 1024 and s.log_format == "json"


def test_json_helpers_from_the_flag_or_the_environment():
    assert _settings([]).json_helpers is None  # the server picks: the cores a worker has beyond its own
    assert _settings([], {"TFBATCH_JSON_HELPERS": "2"}).json_helpers == 2
    assert _settings(["--json-helpers", "0"], {"TFBATCH_JSON_HELPERS": "2"}).json_helpers == 0  # the flag wins
    with pytest.raises(ConfigError, match="TFBATCH_JSON_HELPERS"):
        _settings([], {"TFBATCH_JSON_HELPERS": "-1"})
    with pytest.raises(ConfigError, match="json_helpers"):
        _settings(["--json-helpers", "-1"])
