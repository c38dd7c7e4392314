"""``python -m tfbatch.serve MODEL [flags]``; ``--worker`` is the supervisor's way to start one worker."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        from tfbatch.serve.server import SETTINGS_ENV, run_worker
        from tfbatch.serve.settings import ServeSettings

        p = argparse.ArgumentParser(prog="tfbatch-serve-worker")
        p.add_argument("model")
        p.add_argument("--ready-file")
        args = p.parse_args(argv[1:])
        settings = ServeSettings.model_validate_json(os.environ[SETTINGS_ENV])
        from tfbatch.serve.logs import configure_logging

        configure_logging(settings.log_level, settings.log_format)
        return run_worker(args.model, settings, ready_file=args.ready_file)

    from tfbatch.serve.cli import add_serve_arguments, serve_main

    p = argparse.ArgumentParser(prog="python -m tfbatch.serve")
    add_serve_arguments(p)
    return serve_main(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
