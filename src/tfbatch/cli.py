"""The ``tfbatch`` command. The parser is built on call, never at import time."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

from tfbatch.errors import TfbatchError


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    key, value = text.split("=", 1)
    return key, value


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


def add_transform_arguments(p: argparse.ArgumentParser) -> None:
    """Flags named after CreateTransformJob fields; None means 'not given' so --job can fill it."""
    p.add_argument("--model", required=True, help="model.tar.gz or model directory (path or URI)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--input", help="input prefix: folder, s3://bucket/prefix, ... (S3Prefix)")
    src.add_argument("--manifest", help="ManifestFile URI")
    p.add_argument("--output", help="output prefix (S3OutputPath)")
    p.add_argument("--job", help="CreateTransformJob request JSON; flags override it")
    p.add_argument("--content-type")
    p.add_argument("--compression", choices=["None", "Gzip"])
    p.add_argument("--split-type", choices=["None", "Line", "RecordIO", "TFRecord"])
    p.add_argument("--batch-strategy", choices=["SingleRecord", "MultiRecord"])
    p.add_argument("--max-payload-mb", type=int)
    p.add_argument("--max-concurrent-transforms", type=int)
    p.add_argument("--accept")
    p.add_argument("--assemble-with", choices=["None", "Line"])
    p.add_argument("--instance-count", type=int)
    p.add_argument("--input-filter")
    p.add_argument("--output-filter")
    p.add_argument("--join-source", choices=["None", "Input"])
    p.add_argument("--env", type=_key_value, action="append", metavar="K=V", help="repeatable")
    p.add_argument("--invocations-timeout", type=int)
    p.add_argument("--invocations-max-retries", type=int)
    p.add_argument("--max-batch-size", type=int, help="model batch size formed across requests and files")
    p.add_argument("--batch-timeout-ms", type=float)
    p.add_argument("--on-error", choices=["continue", "fail-object"])
    p.add_argument("--install-requirements", action="store_true", default=None,
                   help="pip-install code/requirements.txt before loading the handler script")


def spec_from_args(args: argparse.Namespace):
    from tfbatch.transform.spec import TransformSpec, spec_from_create_transform_job

    fields = spec_from_create_transform_job(args.job) if args.job else {}
    names = [
        "model", "input", "manifest", "output", "content_type", "compression", "split_type",
        "batch_strategy", "max_payload_mb", "max_concurrent_transforms", "accept", "assemble_with",
        "instance_count", "input_filter", "output_filter", "join_source", "invocations_timeout",
        "invocations_max_retries", "max_batch_size", "batch_timeout_ms", "on_error", "install_requirements",
    ]
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            fields[name] = value
    if args.input or args.manifest:  # a flag source replaces the job file's source
        fields.pop("manifest" if args.input else "input", None)
    if args.env:
        fields["env"] = {**fields.get("env", {}), **dict(args.env)}
    return TransformSpec.build(**fields)


def _cmd_transform(args: argparse.Namespace) -> int:
    from tfbatch.transform.job import run_transform

    report = run_transform(spec_from_args(args))
    print(
        f"transform: {report.succeeded}/{report.objects} objects succeeded, {report.failed} failed "
        f"in {report.seconds:.1f}s"
    )
    return 0 if report.ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from tfbatch.demo import run_demo

    result = run_demo(args.workdir, epochs=args.epochs)
    return 0 if result["accuracy"] >= 0.9 else 1


def build_parser() -> argparse.ArgumentParser:
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

    p = sub.add_parser("transform", help="run a batch transform job")
    add_transform_arguments(p)
    p.set_defaults(func=_cmd_transform)

    p = sub.add_parser("demo", help="train on digits, package, transform PNGs, print accuracy")
    p.add_argument("--workdir", default="demo-output")
    p.add_argument("--epochs", type=int, default=30)
    p.set_defaults(func=_cmd_demo)

    _add_optional_commands(sub)
    return parser


def _add_optional_commands(sub) -> None:
    """Subsystems that register their own subcommands (serve, train, data, evaluate)."""
    import importlib

    for module_name in ("tfbatch.serve.cli", "tfbatch.train.cli", "tfbatch.evaluate.cli"):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
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
