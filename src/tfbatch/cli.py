"""The ``tfbatch`` command. The parser is built on call, never at import time."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

from tfbatch.errors import TfbatchError


def _cmd_inspect(args: argparse.Namespace) -> int:
    from tfbatch.artifact import format_inspect, inspect_artifact, open_artifact

    info = inspect_artifact(open_artifact(args.model))
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
    if args.dry_run:
        print(plan_transform(spec).describe(spec))
        return 0
    if spec.engine == "ray":
        engine = get_engine("ray", address=args.ray_address, gpus_per_instance=args.gpus_per_instance or None)
    else:
        engine = get_engine(spec.engine)
    report = run_transform(spec, engine=engine, progress=args.progress)
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
    from tfbatch.transform.cli import add_transform_arguments

    parser = argparse.ArgumentParser(prog="tfbatch", description=__doc__)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="list models, versions and signatures of an artifact")
    p.add_argument("model")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("package", help="build model.tar.gz from SavedModels and a code/ folder")
    p.add_argument("savedmodels", nargs="+")
    p.add_argument("--code", help="folder holding inference.py, requirements.txt, lib/")
    p.add_argument("--name", action="append", help="model name (repeat for several models)")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=_cmd_package)

    p = sub.add_parser("demo", help="train on digits, package, transform PNGs, print accuracy")
    p.add_argument("--workdir", default="demo-output")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--distributed", type=int, metavar="N", default=0,
                   help="train data-parallel with N worker processes from TFRecords, then evaluate")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("transform", help="run a batch transform job")
    add_transform_arguments(p)
    p.set_defaults(func=_cmd_transform)

    _add_subsystem_commands(sub)
    return parser


def _add_subsystem_commands(sub) -> None:
    """Subsystems register their own subcommands (serve, train, data, evaluate)."""
    from tfbatch.evaluate import cli as evaluate_cli
    from tfbatch.serve import cli as serve_cli
    from tfbatch.train import cli as train_cli

    for module in (serve_cli, train_cli, evaluate_cli):
        module.add_parser(sub)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose > 1 else logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except TfbatchError as err:
        print(f"tfbatch {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
