"""``--precision``: fp32 (default), or bf16/fp16 where the hardware runs them natively.

A SavedModel's graph is already built, so a Keras mixed-precision policy cannot reach it;
TensorFlow's grappler can: ``auto_mixed_precision_onednn_bfloat16`` rewrites the graph to
bfloat16 on CPUs with AVX512-BF16 or AMX (oneDNN), ``auto_mixed_precision`` to float16 on
NVIDIA GPUs. Anywhere else the rewrite would emulate the narrow type and be slower, so the
choice is refused with the reason rather than silently ignored.
"""

from __future__ import annotations

from tfbatch.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def tensorflow_gpu_build(search_path: list[str] | None = None) -> bool:
    """Whether the installed TensorFlow can use a GPU (a CUDA or ROCm build), told without
    importing it: its generated ``python/platform/build_info.py`` says so in its source.

    A GPU host with the CPU wheel (``tensorflow-cpu``) runs every op on the CPU, so there the
    GPU nodes in ``/dev`` must not decide the precision (cli.py), and GPUs asked for per
    instance are refused (engines/local.py ``gpu_plan``). A layout not recognised counts as a
    GPU build (the check in the instance, after TensorFlow lists its devices, decides then).
    """
    import importlib.machinery
    import re
    from pathlib import Path

    spec = importlib.machinery.PathFinder.find_spec("tensorflow", search_path)
    if spec is None or not spec.submodule_search_locations:
        return False
    for root in spec.submodule_search_locations:
        try:
            text = (Path(root) / "python" / "platform" / "build_info.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        return re.search(r"""['"]is_(cuda|rocm)_build['"]\s*,\s*True""", text) is not None
    return True


def precision_plan(precision: str, flags: frozenset[str], gpus: int) -> dict[str, bool]:
    """The grappler options for ``precision`` on this hardware; ConfigError if it cannot run here."""
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return {}
    if gpus > 0:
        if precision == "fp16":
            return {"auto_mixed_precision": True}
        raise ConfigError(
            "--precision bf16 on GPU is not supported by TensorFlow's graph rewrite here; use --precision fp16"
        )
    if precision == "fp16":
        raise ConfigError("--precision fp16 needs a GPU (CPUs emulate float16 and run slower); none is visible")
    if not flags & BF16_CPU_FLAGS:
        raise ConfigError(
            "--precision bf16 needs a CPU with AVX512-BF16 or AMX (cpu flags avx512_bf16 / amx_bf16); "
            "this CPU has neither, so bfloat16 would be emulated and slower than fp32"
        )
    return {"auto_mixed_precision_onednn_bfloat16": True}


def apply_precision(precision: str, gpus: int) -> dict[str, bool]:
    """Check and switch on ``precision`` before the model loads; returns the options set."""
    options = precision_plan(precision, cpu_flags(), gpus)
    if options:
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options(options)
    return options


def enable_memory_growth() -> int:
    """Memory growth on every visible GPU (before any allocation); returns how many there are.

    Usually the process's first TensorFlow import, so it goes through ``import_tensorflow``.
    """
    from tfbatch.runtime.tf_import import import_tensorflow

    tf = import_tensorflow()

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised in this process: growth is whatever was set then
            pass
    return len(gpus)
