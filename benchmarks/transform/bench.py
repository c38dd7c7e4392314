"""Batch-transform benchmark: tfbatch vs tf.data vs SageMaker's architecture, in one run.

Same JPEG files, same ``model.tar.gz``, same machine, one after another:

  (a) ``tfbatch transform`` as a user runs it: the CLI in a fresh process;
  (b) an expert's hand-written tf.data pipeline (:mod:`benchmarks.transform.tfdata_baseline`);
  (c) one HTTP request per image, base64 JSON, to a TFS-style REST server with TFS batching,
      at 64 concurrent requests (:mod:`benchmarks.transform.http_baseline`).

    python -m benchmarks.transform.bench --models mobilenet_v2,resnet50 --images 1000 \\
        --out benchmarks/transform/results.json

writes the JSON and a markdown table beside it (``results.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.common import measure
from benchmarks.common.dataset import ensure_dataset
from benchmarks.common.measure import TreeMonitor, Run
from benchmarks.common.models import archive_path, ensure_artifact, savedmodel_dir, scriptless_archive

CONTENDERS = {
    "a": "tfbatch transform (CLI)",
    "b": "tf.data by hand",
    "c": "HTTP per image (SageMaker-style)",
}
TARGETS = {"mobilenet_v2": {"a/b": 1.0, "a/c": 2.0}}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _launch(cmd: list[str], log: Path) -> subprocess.Popen:
    handle = open(log, "wb")
    try:
        return subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=_env())
    finally:
        handle.close()


def _run_single(contender: str, model: str, images: int, cmd: list[str], output: Path, log: Path,
                timeout_s: float) -> Run:
    run = Run(contender, model, images, ok=True, command=cmd)
    with TreeMonitor() as rss:
        launched = measure.now()
        proc = _launch(cmd, log)
        rss.watch(proc.pid)
        run.error, run.cpu_s = measure.wait_logged(proc, log, timeout_s)
        ended = measure.now()
    run.ok = run.error is None
    return measure.finish(run, launched, ended, output, rss)


def _wait_for_port(port_file: Path, proc: subprocess.Popen, timeout_s: float) -> int:
    import requests

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before listening")
        if port_file.exists():
            port = int(port_file.read_text())
            try:
                if requests.get(f"http://127.0.0.1:{port}/v1/models/model", timeout=5).status_code == 200:
                    return port
            except requests.RequestException:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"server did not become ready within {timeout_s:.0f}s")


def run_http(model: str, images: int, archive: Path, inputs: Path, output: Path, logs: Path, *,
             concurrency: int, server: str, timeout_s: float) -> Run:
    """Server (load model, ready) then client; the clock starts when the server is launched,
    as a SageMaker job's does when its container starts."""
    py = sys.executable
    port_file = logs / f"{model}-c.port"
    port_file.unlink(missing_ok=True)
    server_cmd = [py, "-m", "benchmarks.transform.http_baseline", "serve", "--model", str(archive),
                  "--port-file", str(port_file), "--server", server]
    run = Run("c", model, images, ok=True, command=server_cmd)
    with TreeMonitor() as rss:
        launched = measure.now()
        srv = _launch(server_cmd, logs / f"{model}-c-server.log")
        rss.watch(srv.pid)
        try:
            port = _wait_for_port(port_file, srv, timeout_s)
            run.extra["server_ready_s"] = measure.now() - launched
            client_cmd = [py, "-m", "benchmarks.transform.http_baseline", "client", "--url", f"http://127.0.0.1:{port}",
                          "--model", str(archive), "--input", str(inputs), "--output", str(output),
                          "--concurrency", str(concurrency)]
            run.command = server_cmd + ["&&"] + client_cmd
            client = _launch(client_cmd, logs / f"{model}-c-client.log")
            rss.watch(client.pid)
            run.error, run.cpu_s = measure.wait_logged(client, logs / f"{model}-c-client.log", timeout_s)
        except RuntimeError as exc:
            run.error = str(exc)
        finally:
            ended = measure.now()
            srv.terminate()
            _, server_cpu = measure.wait_logged(srv, logs / f"{model}-c-server.log", 30)
            run.cpu_s += server_cpu
    run.ok = run.error is None
    return measure.finish(run, launched, ended, output, rss)


def bench_model(model: str, inputs: Path, images: int, workdir: Path, *, contenders: str, batch_size: int,
                concurrency: int, server: str, tfbatch_args: list[str], timeout_s: float,
                no_script: bool = False) -> list[Run]:
    folder = ensure_artifact(model, workdir)
    archive = archive_path(folder)
    # (c) always runs the script (SageMaker's TFS container needs it to take JPEG bodies);
    # (a) can run the same SavedModel without it, which is how a user with an image-bytes model would.
    archive_a = scriptless_archive(folder) if no_script else archive
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    py = sys.executable
    for c in contenders:
        output = workdir / "outputs" / model / c
        shutil.rmtree(output, ignore_errors=True)
        output.parent.mkdir(parents=True, exist_ok=True)
        if c == "a":
            cmd = [py, "-m", "tfbatch", "transform", "--model", str(archive_a), "--input", str(inputs),
                   "--output", str(output), "--content-type", "application/x-image", *tfbatch_args]
            runs.append(_run_single("a", model, images, cmd, output, logs / f"{model}-a.log", timeout_s))
        elif c == "b":
            cmd = [py, "-m", "benchmarks.transform.tfdata_baseline", "--model-dir", str(savedmodel_dir(folder)),
                   "--input", str(inputs), "--output", str(output), "--batch-size", str(batch_size)]
            runs.append(_run_single("b", model, images, cmd, output, logs / f"{model}-b.log", timeout_s))
        elif c == "c":
            runs.append(run_http(model, images, archive, inputs, output, logs, concurrency=concurrency,
                                 server=server, timeout_s=timeout_s))
        else:
            raise ValueError(f"contender {c!r}: expected a, b or c")
        print(f"[{model}] {c}: " + _line(runs[-1]), flush=True)
    _check_agreement(runs, workdir / "outputs" / model)
    return runs


def _line(run: Run) -> str:
    if not run.ok:
        return f"FAILED: {run.error}"
    return (f"{run.steady_images_per_s or 0:.1f} img/s steady, {run.end_to_end_images_per_s or 0:.1f} img/s "
            f"end-to-end, startup {run.startup_s or 0:.1f}s, peak RSS {run.peak_rss_mb:.0f} MB, "
            f"CPU {run.cpu_s:.1f}s")


def _check_agreement(runs: list[Run], outputs: Path) -> None:
    """Every contender must compute the same thing: compare each with (b), else the first."""
    done = [r for r in runs if r.outputs]
    if len(done) < 2:
        return
    ref = next((r for r in done if r.contender == "b"), done[0])
    ref_preds = measure.read_predictions(outputs / ref.contender)
    for r in done:
        if r is not ref:
            r.extra["agreement_with_" + ref.contender] = measure.agreement(ref_preds, measure.read_predictions(outputs / r.contender))


def ratios(runs: list[Run]) -> dict[str, dict[str, float | None]]:
    by = {r.contender: r for r in runs if r.ok}
    out: dict[str, dict[str, float | None]] = {}
    for other in ("b", "c"):
        if "a" in by and other in by:
            a, o = by["a"], by[other]
            out[f"a/{other}"] = {
                "steady": _div(a.steady_images_per_s, o.steady_images_per_s),
                "end_to_end": _div(a.end_to_end_images_per_s, o.end_to_end_images_per_s),
            }
    return out


def median_ratios(rounds: list[dict[str, dict[str, float | None]]]) -> dict[str, dict[str, float | None]]:
    """Each ratio's median over the rounds that measured it (one round: that round's ratios)."""
    from statistics import median

    out: dict[str, dict[str, float | None]] = {}
    for key in dict.fromkeys(k for r in rounds for k in r):
        out[key] = {}
        for kind in ("steady", "end_to_end"):
            values = [r[key][kind] for r in rounds if key in r and r[key][kind] is not None]
            out[key][kind] = median(values) if values else None
    return out


def _div(x: float | None, y: float | None) -> float | None:
    return None if not x or not y else x / y


def machine() -> dict[str, Any]:
    import psutil

    info: dict[str, Any] = {
        "cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(), "python": platform.python_version(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        from importlib.metadata import version

        info["tensorflow"] = version("tensorflow-cpu") if _has("tensorflow-cpu") else version("tensorflow")
    except Exception:  # noqa: BLE001
        pass
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                            text=True, cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        pass
    return info


def _has(dist: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(dist)
        return True
    except PackageNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common.report import write_markdown

    parser = argparse.ArgumentParser(prog="python -m benchmarks.transform.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2", help="comma list: mobilenet_v2,resnet50,tiny")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--out", default="benchmarks/transform/results.json")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "tfbatch-bench"),
                        help="dataset, exported models (cached) and outputs")
    parser.add_argument("--contenders", default="abc")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16,
                        help="batch size of the tf.data pipeline (b); the best CPU ms/image for MobileNetV2 here")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent requests for (c)")
    parser.add_argument("--server", choices=["threaded", "tfs-app"], default="threaded", help="REST server for (c)")
    parser.add_argument("--tfbatch-arg", action="append", default=[],
                        help="extra flag for (a), e.g. --tfbatch-arg=--max-batch-size=16; repeatable. "
                             "Without it (a) runs with tfbatch's own defaults, as a user would")
    parser.add_argument("--no-script", action="store_true",
                        help="(a) runs an archive without code/inference.py (the SavedModel decodes JPEG itself)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per contender")
    parser.add_argument("--note", default="", help="free text stored with the results (e.g. machine load)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of every contender; the order rotates each round (abc, bca, cab) so drift in "
                             "the machine's load falls on each in turn, and the ratios reported are the median "
                             "of the per-round ratios")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: expected a positive number of rounds")

    workdir = Path(args.workdir)
    inputs = ensure_dataset(workdir / f"dataset-{args.images}-{args.seed}", args.images, seed=args.seed)
    dataset_meta = json.loads((inputs.parent / "dataset.json").read_text())["summary"]
    for path in inputs.iterdir():  # same warm page cache for every contender
        path.read_bytes()
    results: dict[str, Any] = {
        "command": "python -m benchmarks.transform.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "load_average_before": os.getloadavg(),
        "note": args.note,
        "dataset": dataset_meta,
        "settings": {"batch_size_b": args.batch_size, "concurrency_c": args.concurrency,
                     "server_c": args.server, "tfbatch_args": args.tfbatch_arg,
                     "a_script": not args.no_script,
                     "c_batching": "SAGEMAKER_TFS defaults: max_batch_size 8, batch_timeout_micros 1000"},
        "models": {},
    }
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        runs: list[Run] = []
        per_round: list[dict[str, dict[str, float | None]]] = []
        for round_no in range(args.repeat):
            order = args.contenders[round_no % len(args.contenders):] + args.contenders[:round_no % len(args.contenders)]
            this_round = bench_model(model, inputs, args.images, workdir, contenders=order,
                                     batch_size=args.batch_size, concurrency=args.concurrency, server=args.server,
                                     tfbatch_args=args.tfbatch_arg, timeout_s=args.timeout, no_script=args.no_script)
            for run in this_round:
                run.extra["round"] = round_no
            runs += sorted(this_round, key=lambda r: r.contender)
            per_round.append(ratios(this_round))
        results["models"][model] = {"runs": [asdict(r) for r in runs], "ratios": median_ratios(per_round),
                                    "rounds": per_round, "targets": TARGETS.get(model, {})}
    results["load_average_after"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    write_markdown(results, out.with_suffix(".md"))
    print(out.with_suffix(".md").read_text())
    failed = [r for m in results["models"].values() for r in m["runs"] if not r["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
