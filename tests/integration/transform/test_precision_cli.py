"""--precision and --gpus-per-instance through the CLI: refused up front, with the reason, where the
hardware or the installed TensorFlow lacks what they ask for."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tfbatch.runtime.placement import count_nvidia_gpus
from tfbatch.runtime.precision import BF16_CPU_FLAGS, cpu_flags, tensorflow_gpu_build


def _transform(tmp_path, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``tfbatch transform`` of one junk image with a model that does not exist, plus ``flags``."""
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / "a.png").write_bytes(b"x")
    return subprocess.run([sys.executable, "-m", "tfbatch", "transform", "--model", str(tmp_path / "no-model"),
                           "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                           "--content-type", "application/x-image", *flags],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.skipif(bool(cpu_flags() & BF16_CPU_FLAGS) or count_nvidia_gpus() > 0,
                    reason="this machine can run bf16; the refusal is for machines that cannot")
def test_bf16_is_refused_before_any_work_on_a_cpu_without_it(tmp_path):
    out = _transform(tmp_path, "--precision", "bf16")
    assert out.returncode == 2
    assert "--precision bf16 needs a CPU with AVX512-BF16 or AMX" in out.stderr
    # Refused before the model was even looked for, and nothing was written.
    assert "no-model" not in out.stderr and not (tmp_path / "out").exists()


def _on_a_gpu_host(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    """The CLI with CUDA_VISIBLE_DEVICES=0, which makes a GPU visible to tfbatch's checks on any
    machine: with the CPU wheel installed, it looks like a GPU host where TensorFlow is the CPU build."""
    return _transform(tmp_path, *flags, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})


@pytest.mark.skipif(tensorflow_gpu_build(), reason="the installed TensorFlow is a GPU build")
def test_a_gpu_host_with_the_cpu_wheel_runs_bf16_on_the_cpu(tmp_path):
    """A lent GPU machine with ``tensorflow-cpu`` refused bf16 for the GPU's /dev nodes, though
    every op runs on its (AMX) CPU there."""
    out = _on_a_gpu_host(tmp_path, "--precision", "bf16")
    assert "on GPU" not in out.stdout + out.stderr
    if cpu_flags() & BF16_CPU_FLAGS:  # passed the check: the job ran, and its instance found no model
        assert out.returncode == 1
        assert "ArtifactError: model artifact" in out.stdout and "no-model" in out.stdout
    else:
        assert out.returncode == 2
        assert "--precision bf16 needs a CPU with AVX512-BF16 or AMX" in out.stderr


@pytest.mark.skipif(tensorflow_gpu_build(), reason="the installed TensorFlow is a GPU build")
def test_fp16_on_a_gpu_host_with_the_cpu_wheel_names_the_wheel(tmp_path):
    out = _on_a_gpu_host(tmp_path, "--precision", "fp16")
    assert out.returncode == 2
    assert "--precision fp16 needs TensorFlow's GPU build" in out.stderr
    assert "no-model" not in out.stderr and not (tmp_path / "out").exists()


@pytest.mark.skipif(tensorflow_gpu_build(), reason="the installed TensorFlow is a GPU build")
def test_gpus_asked_for_on_a_gpu_host_with_the_cpu_wheel_are_refused(tmp_path):
    """--gpus-per-instance on such a host would hand out GPUs TensorFlow never uses."""
    out = _on_a_gpu_host(tmp_path, "--gpus-per-instance", "1")
    assert out.returncode == 2
    assert "--gpus-per-instance 1 asks for GPUs, but the installed TensorFlow is a CPU build" in out.stderr
    assert not list((tmp_path / "out").glob("*.out"))  # refused as the engine plans, before any object
