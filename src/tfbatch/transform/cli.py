"""``tfbatch transform``'s flags, named after CreateTransformJob fields, and the spec they make.

The command itself lives in ``tfbatch.cli``: running a job needs an engine, and engines
sit above this package.
"""

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
    p.add_argument("--kms-key-id", help="TransformOutput.KmsKeyId: write S3 outputs with SSE-KMS under this key")
    p.add_argument("--content-type", help="ContentType of the records, e.g. application/x-image, application/json")
    p.add_argument("--compression", choices=["None", "Gzip"], help="CompressionType of the input objects")
    p.add_argument("--split-type", choices=["None", "Line", "RecordIO", "TFRecord"],
                   help="SplitType: how an object is cut into records (None: one record per object)")
    p.add_argument("--batch-strategy", choices=["SingleRecord", "MultiRecord"],
                   help="BatchStrategy: one record per request, or as many as --max-payload-mb allows")
    p.add_argument("--max-payload-mb", type=int, help="MaxPayloadInMB: request size limit (default 6)")
    p.add_argument("--max-record-mb", type=int,
                   help="largest record (the whole object with split type None) read, in MiB; "
                        "MaxPayloadInMB applies too when smaller (default 100)")
    p.add_argument("--max-image-pixels", type=int,
                   help="largest image (width x height, from its header) decoded or sent to the model "
                        "(default 50000000)")
    p.add_argument("--max-concurrent-transforms", type=int, help="MaxConcurrentTransforms: requests in flight per instance")
    p.add_argument("--accept", help="Accept: content type asked of the handler for the outputs")
    p.add_argument("--assemble-with", choices=["None", "Line"], help="AssembleWith: how outputs of one object are joined")
    p.add_argument("--instance-count", type=int, help="InstanceCount: worker processes (or Ray actors)")
    p.add_argument("--input-filter", help="DataProcessing.InputFilter JSONPath, e.g. '$[1:]'")
    p.add_argument("--output-filter", help="DataProcessing.OutputFilter JSONPath applied to the joined output")
    p.add_argument("--join-source", choices=["None", "Input"], help="DataProcessing.JoinSource: Input joins each input to its output")
    p.add_argument("--env", type=_key_value, action="append", metavar="K=V", help="repeatable")
    p.add_argument("--invocations-timeout", type=int, help="InvocationsTimeoutInSeconds per request")
    p.add_argument("--invocations-max-retries", type=int, help="InvocationsMaxRetries per request")
    p.add_argument("--max-batch-size", type=int,
                   help="model batch size formed across requests and files (default: chosen by a short "
                        "probe of the job's own batches, at most 10%% of its rows)")
    p.add_argument("--lane-workers", type=int,
                   help="image jobs with no script: batches read, decoded and run at once "
                        "(default: one per core of the instance's share, at least 3)")
    p.add_argument("--processes", type=int,
                   help="worker processes per instance (Ray: actors), each with the model and a share of "
                        "the instance's objects and cores (default where no GPU is given, or only GPUs that the "
                        "installed TensorFlow, a CPU build, cannot use: one per 4 cores, "
                        "or per 2 and at least 2 for a script with a single handler; at most one per 4,000 "
                        "objects)")
    p.add_argument("--batch-timeout-ms", type=float, help="wait this long for a model batch to fill")
    p.add_argument("--batching-parameters-file",
                   help="TF Serving BatchingParameters text proto; its fields win over --max-batch-size, "
                        "--batch-timeout-ms and SAGEMAKER_TFS_* (docs/serving.md)")
    p.add_argument("--on-error", choices=["continue", "fail-object"],
                   help="a failed record costs one error line (continue) or its whole object (fail-object)")
    p.add_argument("--install-requirements", action="store_true", default=None,
                   help="pip-install code/requirements.txt before loading the handler script")
    p.add_argument("--no-resume", dest="resume", action="store_false", default=None,
                   help="ignore the ledger of an earlier run of this job and redo every object")
    p.add_argument("--follow-symlinks", action="store_true", default=None,
                   help="local input: walk into symbolic links to folders (each folder once, loops refused)")
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
    p.add_argument("--gpus-per-instance", type=float,
                   help="GPUs each instance holds (local: its CUDA_VISIBLE_DEVICES share, by default an even share "
                        "where TensorFlow is a GPU build, none where it is the CPU wheel; ray: the actor's GPUs)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"],
                   help="fp32 (default); bf16 on CPUs with AVX512-BF16/AMX; fp16 on GPUs. Refused elsewhere")
    p.add_argument("--handler-workers", type=int, metavar="N",
                   help="processes per instance running code/inference.py's hooks, or with no script the JSON/CSV "
                        "parse and image decode (default: up to the cores divided by the instances, 2 at first "
                        "and one more while they are busy; none for a script that imports TensorFlow or "
                        "below 3 cores per instance (2 for a MultiRecord job with a SplitType, or a script "
                        "that holds an image library such as PIL): its hooks run in process, a hop at a time, until they "
                        "take 40%% of its CPU on 2+ cores; N: N at once; 0: in the instance's own process, "
                        "a hop at a time, never moved (hooks that need the job's GPU))")
    p.add_argument("--progress", choices=["auto", "bar", "log", "off"], default="auto",
                   help="progress display on stderr (auto: a bar on a terminal, log lines otherwise)")


def spec_from_args(args: argparse.Namespace):
    from tfbatch.transform.spec import TransformSpec, spec_from_create_transform_job

    fields = spec_from_create_transform_job(args.job) if args.job else {}
    names = [
        "model", "input", "manifest", "output", "content_type", "compression", "split_type",
        "batch_strategy", "max_payload_mb", "max_record_mb", "max_image_pixels", "max_concurrent_transforms", "accept", "assemble_with",
        "instance_count", "input_filter", "output_filter", "join_source", "invocations_timeout",
        "invocations_max_retries", "max_batch_size", "batch_timeout_ms", "on_error", "install_requirements", "resume",
        "engine", "follow_symlinks", "kms_key_id", "precision", "gpus_per_instance",
        "retry_failed", "max_error_rate", "wait_lock", "handler_workers", "lane_workers", "processes",
    ]
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            fields[name] = value
    if args.input or args.manifest:  # a flag source replaces the job file's source
        fields.pop("manifest" if args.input else "input", None)
    if args.env:
        fields["env"] = {**fields.get("env", {}), **dict(args.env)}
    if getattr(args, "batching_parameters_file", None):
        import os

        from tfbatch.runtime.batching_params import read_batching_parameters

        path = os.path.abspath(args.batching_parameters_file)
        read_batching_parameters(path)  # a bad file fails the command, not every instance later
        # Instances read it through the container environment, like SAGEMAKER_TFS_* variables.
        fields["env"] = {**fields.get("env", {}), "TFBATCH_BATCHING_PARAMETERS_FILE": path}
    return TransformSpec.build(**fields)
