# PYTHON_ARGCOMPLETE_OK
"""The ``tfbatch`` command. The parser is built on call, never at import time."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from typing import NoReturn, Sequence

from tfbatch.errors import (
    ArtifactError,
    ConfigError,
    DependencyMissing,
    HandlerError,
    InvalidInput,
    NotFound,
    TfbatchError,
)

# Exit codes, documented in the README and the --help epilog.
EXIT_OK = 0
EXIT_RECORDS_FAILED = 1  # the job ran; some records or objects failed (see errors.jsonl)
EXIT_USAGE = 2  # bad flags, job spec, artifact or handler script: fix the input and rerun
EXIT_INFRASTRUCTURE = 3  # storage, network, cluster or an unexpected fault: rerunning may succeed

DESCRIPTION = """\
TensorFlow batch inference, serving and training on image data, with the model.tar.gz
artifacts and Batch Transform job settings of SageMaker's TensorFlow Serving container."""

EPILOG = """\
exit status:
  0  success
  1  the job finished but some records failed (listed in <output>/_tfbatch/errors.jsonl)
  2  usage or configuration error (flags, job JSON, artifact, inference.py)
  3  infrastructure error (storage, network, Ray cluster, unexpected fault)

Run 'tfbatch COMMAND --help' for a command's options. Shell completion:
  pip install argcomplete && eval "$(register-python-argcomplete tfbatch)"
"""

_USAGE_ERRORS = (ConfigError, InvalidInput, NotFound, ArtifactError, DependencyMissing, HandlerError)


def exit_code_for(exc: BaseException) -> int:
    """The process exit status for an error that ended a command."""
    if isinstance(exc, _USAGE_ERRORS):
        return EXIT_USAGE
    if isinstance(exc, TfbatchError):
        return EXIT_INFRASTRUCTURE
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)):
        return EXIT_USAGE  # a path the user gave
    if isinstance(exc, ValueError):
        return EXIT_USAGE
    return EXIT_INFRASTRUCTURE


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from tfbatch import __version__

    try:
        installed = version("tfbatch")
    except PackageNotFoundError:
        installed = __version__
    return f"tfbatch {installed} (Python {sys.version.split()[0]})"


def _cmd_inspect(args: argparse.Namespace) -> int:
    from tfbatch.artifact import format_inspect, inspect_artifact

    info = inspect_artifact(args.model)  # an archive is extracted to a temporary folder, then deleted
    print(json.dumps(info, indent=2) if args.json else format_inspect(info))
    return 0


def _cmd_package(args: argparse.Namespace) -> int:
    from tfbatch.artifact import package

    out = package(args.savedmodels, args.output, code_dir=args.code, names=args.name or None)
    print(out)
    return 0


def _cmd_transform(args: argparse.Namespace) -> int:
    from tfbatch.api import plan_transform, run_transform
    from tfbatch.engines import get_engine
    from tfbatch.transform.cli import spec_from_args

    spec = spec_from_args(args)
    if spec.precision != "fp32":  # refuse before listing or loading anything
        import os

        from tfbatch.runtime.placement import count_nvidia_gpus, visible_gpus
        from tfbatch.runtime.precision import cpu_flags, precision_plan, tensorflow_gpu_build

        gpus = len(visible_gpus(os.environ, count_nvidia_gpus()))
        if gpus and not tensorflow_gpu_build():
            # A GPU host with TensorFlow's CPU wheel: every op runs on the CPU.
            if spec.precision == "fp16":
                raise ConfigError("--precision fp16 needs TensorFlow's GPU build; this machine has a GPU but the "
                                  "installed TensorFlow is a CPU build (pip install 'tfbatch[gpu]')")
            gpus = 0
        precision_plan(spec.precision, cpu_flags(), gpus)
    if args.dry_run:
        print(plan_transform(spec).describe(spec))
        return 0
    if spec.engine == "ray":
        engine = get_engine("ray", address=args.ray_address, gpus_per_instance=args.gpus_per_instance or None)
    else:
        engine = get_engine(spec.engine)
    from tfbatch.console.static import StaticReport, spec_details

    # The job's progress callback also feeds the console's aggregates, for report.html.
    with StaticReport(name=spec.fingerprint(), instances=spec.instance_count, output=spec.output,
                      details=spec_details(spec), progress=args.progress) as html_report:
        report = run_transform(spec, engine=engine, progress=html_report.progress)
    html_report.write(report)
    print(report.summary())
    return 0 if report.ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.distributed:
        return _demo_distributed(args)
    from tfbatch.demo import run_demo

    result = run_demo(args.workdir, epochs=args.epochs)
    return 0 if result["accuracy"] >= 0.9 else 1


def _demo_distributed(args: argparse.Namespace) -> int:
    """The training path on real data: TFRecords -> N-worker training -> package -> transform -> evaluate."""
    from tfbatch.demo import run_digits_end_to_end

    result = run_digits_end_to_end(args.workdir, workers=args.distributed)
    print(
        f"[demo] trained with {args.distributed} workers in {result.train.train_seconds:.1f}s, "
        f"transformed in {result.transform_seconds:.1f}s; accuracy {result.accuracy:.4f}\n"
        f"[demo] confusion matrix: {result.confusion_png}\n[demo] report: {result.report_json}\n"
        f"[demo] total {result.seconds:.1f}s"
    )
    return 0 if result.accuracy is not None and result.accuracy >= 0.95 else 1


def build_parser() -> argparse.ArgumentParser:
    """The whole ``tfbatch`` parser, subsystems' commands included."""
    from tfbatch.transform.cli import add_transform_arguments

    parser = argparse.ArgumentParser(prog="tfbatch", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version(), help="print the version and exit")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log progress (-v) or everything (-vv) to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("inspect", help="list models, versions and signatures of an artifact",
                       description="List the models, versions and signatures in a model.tar.gz or model folder.")
    p.add_argument("model", help="model.tar.gz or model folder (path or URI)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("package", help="build model.tar.gz from SavedModels and a code/ folder",
                       description="Build a SageMaker-style model.tar.gz from SavedModel folders.")
    p.add_argument("savedmodels", nargs="+", metavar="SAVEDMODEL", help="SavedModel folder(s)")
    p.add_argument("--code", help="folder holding inference.py, requirements.txt, lib/")
    p.add_argument("--name", action="append", help="model name (repeat for several models)")
    p.add_argument("-o", "--output", required=True, help="where to write the archive")
    p.set_defaults(func=_cmd_package)

    p = sub.add_parser("demo", help="train on digits, package, transform PNGs, print accuracy")
    p.add_argument("--workdir", default="demo-output", help="folder for the demo's files (default demo-output)")
    p.add_argument("--epochs", type=int, default=30, help="training epochs (default 30)")
    p.add_argument("--distributed", type=int, metavar="N", default=0,
                   help="train data-parallel with N worker processes from TFRecords, then evaluate")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("transform", help="run a batch transform job")
    add_transform_arguments(p)
    p.set_defaults(func=_cmd_transform)

    _add_subsystem_commands(sub)
    return parser


def _add_subsystem_commands(sub) -> None:
    """Subsystems register their own subcommands (serve, api, train, data, evaluate)."""
    from tfbatch.apiserver import cli as api_cli
    from tfbatch.evaluate import cli as evaluate_cli
    from tfbatch.serve import cli as serve_cli
    from tfbatch.train import cli as train_cli

    for module in (serve_cli, api_cli, train_cli, evaluate_cli):
        module.add_parser(sub)


def _enable_completion(parser: argparse.ArgumentParser) -> None:
    """Shell completion when argcomplete is installed (it exits here while completing)."""
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tfbatch`` with ``argv``; returns the exit status (see EPILOG)."""
    parser = build_parser()
    _enable_completion(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose > 1 else logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"tfbatch {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - every failure becomes one line and a documented status
        code = exit_code_for(err)
        if args.verbose:
            traceback.print_exc()
        message = str(err) if isinstance(err, TfbatchError) else f"{type(err).__name__}: {err} (-v shows where)"
        print(f"tfbatch {args.command}: error: {message}", file=sys.stderr)
        return code


def run() -> NoReturn:
    """The ``tfbatch`` console script and ``python -m tfbatch``: ``main()``, then
    ``runtime.exit.end`` (no teardown of TensorFlow or Ray). ``main`` returns to its caller.

    Before NumPy is imported, this process and every process it starts get one OpenBLAS thread
    unless the environment names a count (``runtime.blas.one_blas_thread``)."""
    from tfbatch.runtime.blas import one_blas_thread

    os.environ.update(one_blas_thread(os.environ))
    code = main()
    from tfbatch.runtime.exit import end

    end(code)


if __name__ == "__main__":
    run()
