"""``tfbatch data ...`` and ``tfbatch train ...`` (registered by :func:`add_parser`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence


def _cmd_data(args: argparse.Namespace) -> int:
    from tfbatch.train import data

    if args.source_kind == "cifar10":
        info = data.write_cifar10(args.source, args.out, eval_png_dir=args.eval_png)
    elif args.source_kind == "images":
        info = data.write_image_folder(
            args.source, args.out, image_size=tuple(args.image_size), channels=args.channels,
            validation_fraction=args.validation_fraction, eval_fraction=args.eval_fraction,
            seed=args.seed, eval_png_dir=args.eval_png,
        )
    else:
        info = data.write_digits(args.out, seed=args.seed, eval_png_dir=args.eval_png,
                                 upscale=args.upscale)
    print(info.model_dump_json(indent=2))
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from tfbatch.train.config import TrainConfig
    from tfbatch.train.launcher import train
    from tfbatch.train.pipeline import Augment

    settings = {
        "data_dir": args.data, "out_dir": args.out, "model": args.model, "workers": args.workers,
        "epochs": args.epochs, "batch_size": args.batch_size, "learning_rate": args.learning_rate,
        "warmup_epochs": args.warmup_epochs, "steps_per_epoch": args.steps_per_epoch,
        "checkpoint_every_steps": args.checkpoint_every_steps, "seed": args.seed,
        "threads_per_worker": args.threads_per_worker, "export_version": args.export_version,
        "export_include_classes": not args.probabilities_only,
        "augment": Augment(pad=args.pad, flip=not args.no_flip),
    }
    if args.config:
        settings = {**json.loads(Path(args.config).read_text()),
                    **{k: v for k, v in settings.items() if v is not None}}
    config = TrainConfig(**{k: v for k, v in settings.items() if v is not None})
    if args.engine == "ray":
        from tfbatch.train.ray_train import train_on_ray

        result = train_on_ray(config, address=args.ray_address, num_workers=config.workers,
                              gpus_per_worker=args.gpus_per_worker or 0)
    else:
        result = train(config)
    print(result.model_dump_json(indent=2))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="write TFRecord datasets (cifar10 | images | digits)")
    p.add_argument("source_kind", choices=["cifar10", "images", "digits"], help="what --source holds")
    p.add_argument("--source", help="cifar-10-python.tar.gz, or a folder of <class>/<image>")
    p.add_argument("--out", required=True, help="dataset folder (train/ validation/ eval/ dataset.json)")
    p.add_argument("--eval-png", help="also write the eval split as <index>_<label>.png here")
    p.add_argument("--image-size", type=int, nargs=2, default=[32, 32], metavar=("H", "W"),
                   help="resize images to H W (default 32 32)")
    p.add_argument("--channels", type=int, default=3, choices=[1, 3], help="1 grey or 3 RGB (default 3)")
    p.add_argument("--validation-fraction", type=float, default=0.1, help="share held out for validation")
    p.add_argument("--eval-fraction", type=float, default=0.1, help="share held out for evaluation")
    p.add_argument("--upscale", type=int, default=1, help="digits: pixel repeat for eval PNGs")
    p.add_argument("--seed", type=int, default=0, help="shuffle/split seed")
    p.set_defaults(func=_cmd_data)

    p = sub.add_parser("train", help="data-parallel training (MultiWorkerMirroredStrategy) + export")
    p.add_argument("--data", help="dataset folder written by 'tfbatch data'")
    p.add_argument("--out", help="run folder: checkpoints/, logs/, export/<version>/, result.json")
    p.add_argument("--config", help="TrainConfig JSON; flags override it")
    p.add_argument("--model", choices=["auto", "cifar", "digits"], help="network (auto: from the dataset)")
    p.add_argument("--workers", type=int, help="data-parallel worker processes")
    p.add_argument("--epochs", type=int, help="training epochs")
    p.add_argument("--batch-size", type=int, help="per worker")
    p.add_argument("--learning-rate", type=float, help="for one worker; scaled by --workers")
    p.add_argument("--warmup-epochs", type=float, help="learning-rate warm-up length")
    p.add_argument("--steps-per-epoch", type=int, help="cap on steps per epoch")
    p.add_argument("--checkpoint-every-steps", type=int, help="checkpoint interval (resume point)")
    p.add_argument("--threads-per-worker", type=int, help="TensorFlow threads per worker")
    p.add_argument("--export-version", type=int, help="SavedModel version folder under export/")
    p.add_argument("--probabilities-only", action="store_true",
                   help="export one output (bare probability lists, as SageMaker's CIFAR-10 example's model)")
    p.add_argument("--pad", type=int, default=4, help="pad-and-crop augmentation; 0 = off")
    p.add_argument("--no-flip", action="store_true", help="no left-right flips (digits, text)")
    p.add_argument("--seed", type=int, help="initialisation and shuffle seed")
    p.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="local worker processes, or Ray Train workers on a Ray cluster")
    p.add_argument("--ray-address", help="Ray cluster address (default: RAY_ADDRESS, else a local Ray)")
    p.add_argument("--gpus-per-worker", type=float, help="GPUs each Ray Train worker holds")
    p.set_defaults(func=_cmd_train)


def _run(argv: Sequence[str], command: str) -> int:
    parser = argparse.ArgumentParser(prog="tfbatch")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([command, *argv])
    return args.func(args)


def main_data(argv: Sequence[str]) -> int:
    return _run(argv, "data")


def main_train(argv: Sequence[str]) -> int:
    return _run(argv, "train")
