"""CreateTransformJob through ``tfbatch api`` against ``tfbatch transform`` on the same job.

Three ways to run one job (the linear test model over N JSON-lines files, local folders):

- ``cli``: ``tfbatch transform`` as a fresh process, the way a user runs it;
- ``api-first``: boto3 ``create_transform_job`` to a freshly started ``tfbatch api`` (its first
  job: the server process imports TensorFlow and loads the model then, as ``cli`` does);
- ``api-warm``: the next job on the same server (TensorFlow already imported there).

For each: seconds from the launch (process start, or the create call) to the first ``.out``
file, and to the end (process exit, or the job's Completed status seen by polling Describe
every 20 ms). Rounds alternate the three, so load from other work falls on all alike;
medians are reported. Server start-up is not counted: an API server is long-running.

    PYTHONPATH=src:. .venv/bin/python -m benchmarks.apiserver.job_overhead --rounds 3 --out benchmarks/apiserver

Target (issue 22): CreateTransformJob -> first output within 1 s of what ``tfbatch transform`` takes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLL_S = 0.02


def _first_out(folder: Path) -> bool:
    return folder.exists() and any(folder.glob("*.out"))


def _inputs(folder: Path, files: int) -> None:
    folder.mkdir()
    for i in range(files):
        (folder / f"part-{i:03d}.jsonl").write_text("".join(json.dumps([i, j, 0.5]) + "\n" for j in range(20)))


def _run_cli(model: Path, inp: Path, out: Path, env: dict) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tfbatch", "transform", "--model", str(model), "--input",
                             str(inp), "--output", str(out), "--content-type", "application/json", "--split-type",
                             "Line", "--assemble-with", "Line", "--progress", "off"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = None
    while proc.poll() is None:
        if first is None and _first_out(out):
            first = time.perf_counter() - start
        time.sleep(POLL_S)
    end = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"tfbatch transform exited {proc.returncode}")
    return (first if first is not None else end), end


def _run_api(sm, name: str, inp: Path, out: Path) -> tuple[float, float]:
    start = time.perf_counter()
    sm.create_transform_job(
        TransformJobName=name, ModelName="linear",
        TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": inp.as_uri() + "/"}},
                        "ContentType": "application/json", "SplitType": "Line"},
        TransformOutput={"S3OutputPath": out.as_uri() + "/", "AssembleWith": "Line"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1})
    first = None
    while True:
        if first is None and _first_out(out):
            first = time.perf_counter() - start
        status = sm.describe_transform_job(TransformJobName=name)["TransformJobStatus"]
        if status != "InProgress":
            break
        time.sleep(POLL_S)
    end = time.perf_counter() - start
    if status != "Completed":
        raise RuntimeError(f"job {name} ended {status}")
    return (first if first is not None else end), end


class _Api:
    def __init__(self, work: Path, env: dict, model: Path):
        import boto3
        from botocore.config import Config

        from tfbatch.ports import free_ports

        port = free_ports(1)[0]
        self.proc = subprocess.Popen([sys.executable, "-m", "tfbatch", "api", "--port", str(port), "--state-dir",
                                      str(work)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.sm = boto3.client("sagemaker", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                               aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                               aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                               config=Config(retries={"max_attempts": 1}))
        deadline = time.monotonic() + 120
        while True:
            try:
                self.sm.list_models()
                break
            except Exception:  # noqa: BLE001 - not listening yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("tfbatch api did not start") from None
                time.sleep(0.1)
        self.sm.create_model(ModelName="linear", ExecutionRoleArn="arn:aws:iam::000000000000:role/bench",
                             PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": model.as_uri()})

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--out", default=None, help="folder for job_overhead.json")
    args = parser.parse_args(argv)
    from tfbatch.testing.models import make_linear_model

    env = {**os.environ, "AWS_ACCESS_KEY_ID": "AKIDBENCH", "AWS_SECRET_ACCESS_KEY": "bench-secret",
           "AWS_DEFAULT_REGION": "us-east-1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    results: dict[str, list[tuple[float, float]]] = {"cli": [], "api-first": [], "api-warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = work / "model"
        make_linear_model(model / "1")
        inp = work / "in"
        _inputs(inp, args.files)
        for r in range(args.rounds):
            results["cli"].append(_run_cli(model, inp, work / f"cli-{r}", env))
            api = _Api(work / f"state-{r}", env, model)
            try:
                results["api-first"].append(_run_api(api.sm, f"first-{r}", inp, work / f"first-{r}"))
                results["api-warm"].append(_run_api(api.sm, f"warm-{r}", inp, work / f"warm-{r}"))
            finally:
                api.close()
            print(f"round {r}: " + ", ".join(f"{k} first {v[-1][0]:.2f}s end {v[-1][1]:.2f}s"
                                               for k, v in results.items()), flush=True)
    summary = {k: {"first_output_s": round(statistics.median(x[0] for x in v), 3),
                   "end_s": round(statistics.median(x[1] for x in v), 3),
                   "runs": [[round(a, 3), round(b, 3)] for a, b in v]} for k, v in results.items()}
    overhead = {k: round(summary[k]["first_output_s"] - summary["cli"]["first_output_s"], 3)
                for k in ("api-first", "api-warm")}
    report = {"benchmark": "job_overhead", "files": args.files, "rounds": args.rounds, "results": summary,
              "first_output_overhead_s": overhead, "target_s": 1.0, "machine": platform.platform(),
              "cpus": os.cpu_count(), "load_average": os.getloadavg()}
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out, "job_overhead.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0 if max(overhead.values()) <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
