"""``tfbatch evaluate --predictions OUT_DIR [--labels FILE] [--out REPORT_DIR]``."""

from __future__ import annotations

import argparse
from typing import Sequence


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from tfbatch.evaluate.metrics import evaluate, write_report

    names = [n.strip() for n in args.class_names.split(",")] if args.class_names else None
    report = evaluate(args.predictions, args.labels, class_names=names, strict=args.strict)
    json_path, png_path = write_report(report, args.out or args.predictions)
    print(f"Out of {report.total} images, {report.correct} predictions were correct: "
          f"accuracy {report.accuracy:.1%}")
    for score in report.per_class:
        print(f"  {score.name:>12}  precision {score.precision:.3f}  recall {score.recall:.3f}"
              f"  n={score.support}")
    if report.skipped:
        print(f"skipped {len(report.skipped)} file(s); see {json_path}")
    print(f"report: {json_path}\nconfusion matrix: {png_path}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="accuracy, per-class precision/recall, confusion matrix")
    p.add_argument("--predictions", required=True, help="folder of <input>.out files")
    p.add_argument("--labels", help="CSV (file,label) or JSON {file: label}; default: file names")
    p.add_argument("--class-names", help="comma-separated, in class-index order")
    p.add_argument("--out", help="report folder (default: the predictions folder)")
    p.add_argument("--strict", action="store_true", help="fail on the first unreadable file")
    p.set_defaults(func=_cmd_evaluate)


def main_evaluate(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="tfbatch")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["evaluate", *argv])
    return args.func(args)
