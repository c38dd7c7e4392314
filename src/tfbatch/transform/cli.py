"""``tfbatch transform``: flags named after CreateTransformJob fields."""

from __future__ import annotations

import argparse


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    key, value = text.split("=", 1)
    return key, value


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
    p.add_argument("--no-resume", dest="resume", action="store_false", default=None,
                   help="ignore the ledger of an earlier run of this job and redo every object")
    p.add_argument("--retry-failed", action="store_true", default=None,
                   help="also redo objects an earlier run finished with recorded bad-input failures")
    p.add_argument("--max-error-rate", type=float, metavar="FRACTION",
                   help="stop (resumable) once more than this fraction of objects failed, after the first 100 "
                        "(default 0.5; 1 never stops)")
    p.add_argument("--wait-lock", action="store_true", default=None,
                   help="wait for another job using the same output prefix instead of refusing to start")
    p.add_argument("--dry-run", action="store_true", help="print the plan (objects per instance) and exit")
    p.add_argument("--engine", choices=["local", "ray"], help="where instances run (default: local processes)")
    p.add_argument("--ray-address", help="Ray cluster address (default: RAY_ADDRESS, else a local Ray)")
    p.add_argument("--gpus-per-instance", type=float, help="GPUs each Ray instance actor holds")
    p.add_argument("--progress", choices=["auto", "bar", "log", "off"], default="auto",
                   help="progress display on stderr (auto: a bar on a terminal, log lines otherwise)")


def spec_from_args(args: argparse.Namespace):
    from tfbatch.transform.spec import TransformSpec, spec_from_create_transform_job

    fields = spec_from_create_transform_job(args.job) if args.job else {}
    names = [
        "model", "input", "manifest", "output", "content_type", "compression", "split_type",
        "batch_strategy", "max_payload_mb", "max_concurrent_transforms", "accept", "assemble_with",
        "instance_count", "input_filter", "output_filter", "join_source", "invocations_timeout",
        "invocations_max_retries", "max_batch_size", "batch_timeout_ms", "on_error", "install_requirements", "resume",
        "engine", "retry_failed", "max_error_rate", "wait_lock",
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
    from tfbatch.transform.job import plan_transform, run_transform

    spec = spec_from_args(args)
    if args.dry_run:
        print(plan_transform(spec).describe(spec))
        return 0
    if spec.engine == "ray":
        from tfbatch.engines.ray import run_ray_transform

        report = run_ray_transform(spec, address=args.ray_address, gpus_per_instance=args.gpus_per_instance or 0,
                                   progress=args.progress)
    else:
        report = run_transform(spec, progress=args.progress)
    print(report.summary())
    return 0 if report.ok else 1


def add_parser(sub) -> None:
    p = sub.add_parser("transform", help="run a batch transform job")
    add_transform_arguments(p)
    p.set_defaults(func=_cmd_transform)
