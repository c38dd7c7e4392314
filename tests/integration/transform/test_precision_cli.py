"""--precision through the CLI: refused up front, with the reason, where the hardware lacks it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfbatch.runtime.placement import count_nvidia_gpus
from tfbatch.runtime.precision import BF16_CPU_FLAGS, cpu_flags


@pytest.mark.skipif(bool(cpu_flags() & BF16_CPU_FLAGS) or count_nvidia_gpus() > 0,
                    reason="this machine can run bf16; the refusal is for machines that cannot")
def test_bf16_is_refused_before_any_work_on_a_cpu_without_it(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.png").write_bytes(b"x")
    out = subprocess.run([sys.executable, "-m", "tfbatch", "transform", "--model", str(tmp_path / "no-model"),
                          "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                          "--content-type", "application/x-image", "--precision", "bf16"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--precision bf16 needs a CPU with AVX512-BF16 or AMX" in out.stderr
    # Refused before the model was even looked for, and nothing was written.
    assert "no-model" not in out.stderr and not (tmp_path / "out").exists()
