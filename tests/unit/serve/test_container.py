"""The SageMaker container contract without a container: what the environment turns into, and
whether the Dockerfiles could build (no Docker daemon here, so every file and module they name
is checked against the checkout instead)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from tfbatch.serve.cli import add_serve_arguments, settings_from_args
from tfbatch.serve.container import container_argv

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = {"Dockerfile": ("tf-cpu.txt", "cpu"), "Dockerfile.gpu": ("tf-gpu.txt", "gpu")}


def _settings(env: dict, argv=("serve",)):
    args = container_argv(list(argv), env)
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    parsed = p.parse_args(args)
    return parsed.model, settings_from_args(parsed, env)


def test_sagemaker_defaults_with_an_empty_environment():
    model, s = _settings({})
    assert model == "/opt/ml/model"
    assert (s.host, s.port, s.grpc_port, s.workers) == ("0.0.0.0", 8080, 9000, 1)
    # SageMaker's network guards the container: no warning about the missing token there.
    assert s.insecure and not s.exposed_without_auth


def test_the_environment_sagemaker_sets_is_honoured():
    env = {"SM_MODEL_DIR": "/mnt/m", "SAGEMAKER_BIND_TO_PORT": "8123", "SAGEMAKER_SAFE_PORT_RANGE": "20000-20999",
           "SAGEMAKER_GUNICORN_WORKERS": "3", "SAGEMAKER_TFS_ENABLE_BATCHING": "true",
           "SAGEMAKER_TFS_MAX_BATCH_SIZE": "8"}
    model, s = _settings(env)
    assert model == "/mnt/m"
    assert (s.port, s.grpc_port, s.workers) == (8123, 20000, 3)
    runtime = s.runtime_settings(env)
    assert runtime.enable_batching and runtime.max_batch_size == 8


def test_flags_after_serve_win_over_the_environment():
    _, s = _settings({"SAGEMAKER_SAFE_PORT_RANGE": "20000-20999"}, ["serve", "--grpc-port", "-1",
                                                                    "--sagemaker-body-limit"])
    assert s.grpc_port == -1 and s.max_body_bytes == 6 * 1024 * 1024


@pytest.mark.parametrize("value", ["abc", "20000-", "30000-20000", "0-10"])
def test_a_bad_safe_port_range_names_the_variable(value):
    with pytest.raises(SystemExit, match="SAGEMAKER_SAFE_PORT_RANGE"):
        container_argv(["serve"], {"SAGEMAKER_SAFE_PORT_RANGE": value})


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_names_only_files_the_checkout_has(name):
    tf_requirements, extra = DOCKERFILES[name]
    steps = _instructions(ROOT / "docker" / name)
    copied: set[str] = set()
    pip_files: list[str] = []
    installs: list[list[str]] = []
    for word, rest in steps:
        if word == "COPY":
            *sources, _dest = shlex.split(rest)
            for source in sources:
                assert (ROOT / source).exists(), f"{name}: COPY {source}: not in the build context"
                copied.add(source.rstrip("/"))
        elif word == "RUN":
            for command in rest.split("&&"):
                argv = shlex.split(command)
                if argv[:2] == ["pip", "install"]:
                    installs.append(argv)
                    pip_files += [argv[i + 1] for i, a in enumerate(argv) if a in ("-r", "-c")]
    assert pip_files, f"{name}: no requirement or constraint file is used"
    for req in pip_files:
        assert (ROOT / req).is_file(), f"{name}: pip -r/-c {req}: no such file in the checkout"
        assert req in copied or str(Path(req).parent) in copied, f"{name}: {req} is not copied into the image"
    for req in [argv[i + 1] for argv in installs for i, a in enumerate(argv) if a == "-c"]:
        # pip refuses constraints with extras ("tensorflow[and-cuda]"): those must be -r.
        for line in (ROOT / req).read_text().splitlines():
            assert "[" not in line.split("#")[0], f"{name}: constraint file {req} has an extra: {line}"
    assert f"requirements/{tf_requirements}" in pip_files
    # tfbatch itself through its packaging: a plain (non-editable) install of the project.
    project = [a for argv in installs for a in argv if a.startswith(".[")]
    assert project == [f".[{extra},s3]"], f"{name}: the project is not installed with its {extra} extra"
    assert not any("-e" in argv or "--editable" in argv for argv in installs)
    assert {"pyproject.toml", "src"} <= copied
    entry = [rest for word, rest in steps if word == "ENTRYPOINT"]
    assert entry == ['["python", "-m", "tfbatch.serve.container"]']
    assert (ROOT / "src" / "tfbatch" / "serve" / "container.py").is_file()
    assert [rest for word, rest in steps if word == "CMD"] == ['["serve"]']
