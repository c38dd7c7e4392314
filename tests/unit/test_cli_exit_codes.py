"""One mapping from what ended a command to its documented exit status."""

from __future__ import annotations

import pytest

from tfbatch.cli import EXIT_INFRASTRUCTURE, EXIT_USAGE, build_parser, exit_code_for
from tfbatch.errors import (
    ArtifactError,
    DependencyMissing,
    HandlerError,
    ConfigError,
    ModelError,
    RequestTimeout,
    UnsafeArchive,
    Unavailable,
)


@pytest.mark.parametrize("exc", [ConfigError("x"), ArtifactError("x"), UnsafeArchive("x"),
                                 DependencyMissing("x"), HandlerError("x"), FileNotFoundError("x"),
                                 ValueError("x")])
def test_usage_and_configuration_errors_exit_2(exc):
    assert exit_code_for(exc) == EXIT_USAGE


@pytest.mark.parametrize("exc", [Unavailable("x"), RequestTimeout("x"), ModelError("x"),
                                 ConnectionRefusedError("x"), OSError("x"), RuntimeError("x")])
def test_infrastructure_errors_exit_3(exc):
    assert exit_code_for(exc) == EXIT_INFRASTRUCTURE


def test_every_option_of_every_command_has_help():
    import argparse

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not action.help and not isinstance(action, argparse._HelpAction):
                missing.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), ["tfbatch"])
    assert missing == []


def test_top_level_help_is_a_users_page(capsys):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["--help"])
    assert stop.value.code == 0
    page = capsys.readouterr().out
    for needed in ("transform", "serve", "inspect", "exit status", "infrastructure error", "--version"):
        assert needed in page
    assert "import time" not in page and "parser" not in page  # no developer notes
