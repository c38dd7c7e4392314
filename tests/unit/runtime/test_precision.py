"""--precision: what runs where, decided from CPU flags and GPU count (no TensorFlow)."""

from __future__ import annotations

import pytest

from tfbatch.errors import ConfigError
from tfbatch.runtime.precision import cpu_flags, precision_plan, tensorflow_gpu_build


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


def _fake_tensorflow(root, build_info: str | None):
    package = root / "tensorflow"
    (package / "python" / "platform").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    if build_info is not None:
        (package / "python" / "platform" / "build_info.py").write_text(build_info)
    return [str(root)]


@pytest.mark.parametrize("build_info, gpu", [
    ("build_info = collections.OrderedDict([('is_cuda_build', False), ('is_rocm_build', False)])\n", False),
    ("build_info = collections.OrderedDict([('cpu_compiler', 'clang'), ('is_cuda_build', True), ('cuda_version', '12.5')])\n", True),
    ("build_info = collections.OrderedDict([('is_cuda_build', False), ('is_rocm_build', True)])\n", True),
    (None, True),  # a layout it does not know: the instance's own check decides
])
def test_tensorflow_gpu_build_reads_build_info_without_importing(tmp_path, build_info, gpu):
    assert tensorflow_gpu_build(_fake_tensorflow(tmp_path, build_info)) is gpu


def test_no_tensorflow_is_no_gpu_build(tmp_path):
    assert tensorflow_gpu_build([str(tmp_path)]) is False


def test_the_installed_cpu_wheel_is_no_gpu_build():
    """This project's test environment installs ``tensorflow-cpu``: a bf16 job on a GPU host
    with that wheel runs on the CPU, so the GPU's /dev nodes must not refuse it."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("tensorflow-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tensorflow-cpu is not the installed TensorFlow")
    assert tensorflow_gpu_build() is False
