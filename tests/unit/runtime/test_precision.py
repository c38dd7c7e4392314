"""--precision: what runs where, decided from CPU flags and GPU count (no TensorFlow)."""

from __future__ import annotations

import pytest

from tfbatch.errors import ConfigError
from tfbatch.runtime.precision import cpu_flags, precision_plan


def test_fp32_needs_nothing():
    assert precision_plan("fp32", frozenset(), 0) == {}


def test_bf16_on_cpu_needs_avx512_bf16_or_amx():
    assert precision_plan("bf16", frozenset({"avx512_bf16"}), 0) == {"auto_mixed_precision_onednn_bfloat16": True}
    assert precision_plan("bf16", frozenset({"amx_bf16", "amx_tile"}), 0) == {
        "auto_mixed_precision_onednn_bfloat16": True}
    with pytest.raises(ConfigError, match="AVX512-BF16 or AMX"):
        precision_plan("bf16", frozenset({"avx2", "fma"}), 0)


def test_fp16_only_on_gpu():
    assert precision_plan("fp16", frozenset(), 1) == {"auto_mixed_precision": True}
    with pytest.raises(ConfigError, match="needs a GPU"):
        precision_plan("fp16", frozenset({"avx512_bf16"}), 0)
    with pytest.raises(ConfigError, match="use --precision fp16"):
        precision_plan("bf16", frozenset(), 2)


def test_unknown_precision():
    with pytest.raises(ConfigError, match="one of fp32, bf16, fp16"):
        precision_plan("int8", frozenset(), 0)


def test_cpu_flags_parse(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert cpu_flags(str(info)) == frozenset({"fpu", "avx2", "avx512_bf16"})
    assert cpu_flags(str(tmp_path / "none")) == frozenset()
