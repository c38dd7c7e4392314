"""Load on one ``tfbatch api`` server: many transform jobs at once while endpoints answer calls.

Issue 22's target: "20 concurrent jobs and 4 endpoints on one server with nothing lost and no
request above the limits it was given". The run:

1. starts ``tfbatch api`` (free loopback port, temporary state folder, ``--max-concurrent-jobs``,
   ``--max-jobs-in-progress`` = the number of jobs, ``--max-endpoints`` = the number of endpoints);
2. registers the linear test model, creates the endpoints and waits (``endpoint_in_service``);
   one more CreateEndpoint must be ResourceLimitExceeded;
3. runs one reference job alone (its output files are what every later job must equal byte for
   byte) and records each endpoint's answer to a fixed request;
4. creates all jobs at once from a thread pool while one client thread per endpoint calls
   InvokeEndpoint in a loop; one more CreateTransformJob right after must be ResourceLimitExceeded
   (unless a job had already ended by then, which the check allows for);
5. waits for every job (``transform_job_completed_or_stopped``) and checks: all Completed, every
   output equal to the reference, no failed or wrong invoke, and at no instant more jobs running
   than ``--max-concurrent-jobs`` (from Describe's TransformStartTime/TransformEndTime).

    PYTHONPATH=src:. .venv/bin/python -m benchmarks.apiserver.load --out benchmarks/apiserver

Exits non-zero when any check fails. Writes ``load.json`` and ``load.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

KEY, SECRET = "AKIDBENCH", "bench-secret"
ROLE = "arn:aws:iam::000000000000:role/bench"
BODY = json.dumps({"instances": [[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]]}).encode()


def _inputs(folder: Path, files: int, lines: int) -> None:
    folder.mkdir(parents=True)
    for i in range(files):
        (folder / f"part-{i:03d}.jsonl").write_text(
            "".join(json.dumps([i, j, 0.25 * j]) + "\n" for j in range(lines)))


def _outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.out"))}


class _Server:
    """A ``tfbatch api`` process and boto3 clients signed with the credentials it accepts."""

    def __init__(self, work: Path, env: dict[str, str], args: list[str]):
        from tfbatch.ports import free_ports

        self.url = f"http://127.0.0.1:{free_ports(1)[0]}"
        self.log = work / "api.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "tfbatch", "api", "--port", self.url.rsplit(":", 1)[1],
                                          "--state-dir", str(work / "state"), *args], env=env, stdout=out,
                                         stderr=subprocess.STDOUT)
        self.sm = self.client("sagemaker")
        deadline = time.monotonic() + 120  # a failure guard only
        while True:
            try:
                self.sm.list_models()
                return
            except Exception:  # noqa: BLE001 - not listening yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tfbatch api did not start:\n{self.log.read_text()[-3000:]}") from None
                time.sleep(0.1)

    def client(self, service: str):
        import boto3
        from botocore.config import Config

        # Generous pool: every invoke thread and job-creating thread shares no connection with another.
        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1", aws_access_key_id=KEY,
                            aws_secret_access_key=SECRET,
                            config=Config(retries={"max_attempts": 1}, max_pool_connections=64, read_timeout=300))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _create_job(sm, name: str, inp: Path, out: Path) -> None:
    sm.create_transform_job(
        TransformJobName=name, ModelName="linear",
        TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": inp.as_uri() + "/"}},
                        "ContentType": "application/json", "SplitType": "Line"},
        TransformOutput={"S3OutputPath": out.as_uri() + "/", "AssembleWith": "Line"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1})


def _wait_job(sm, name: str) -> dict:
    sm.get_waiter("transform_job_completed_or_stopped").wait(
        TransformJobName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 1200})
    return sm.describe_transform_job(TransformJobName=name)


def _limit_error(call) -> str | None:
    """The AWS error code ``call`` fails with, or None when it succeeds."""
    from botocore.exceptions import ClientError

    try:
        call()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    # An end and a start at the same instant do not overlap: ends sort first.
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


class _Invoker(threading.Thread):
    """Calls one endpoint until told to stop; records latencies, errors and wrong answers."""

    def __init__(self, client, endpoint: str, expected: bytes, stop: threading.Event):
        super().__init__(daemon=True)
        self.client, self.endpoint, self.expected, self.stop = client, endpoint, expected, stop
        self.ms: list[float] = []
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.perf_counter()
            try:
                body = self.client.invoke_endpoint(EndpointName=self.endpoint, ContentType="application/json",
                                                   Body=BODY)["Body"].read()
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                self.errors.append(f"{self.endpoint}: {type(e).__name__}: {e}")
                continue
            self.ms.append((time.perf_counter() - start) * 1000)
            if body != self.expected:
                self.errors.append(f"{self.endpoint}: answer {body[:200]!r} != {self.expected[:200]!r}")


def run(jobs: int, endpoints: int, max_concurrent: int, files: int, lines: int) -> dict:
    from tfbatch.testing.models import make_linear_model

    checks: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="tfbatch-load-") as tmp:
        work = Path(tmp)
        make_linear_model(work / "model" / "1")
        inp = work / "in"
        _inputs(inp, files, lines)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
                   TF_CPP_MIN_LOG_LEVEL="2")
        server = _Server(work, env, ["--max-concurrent-jobs", str(max_concurrent), "--max-jobs-in-progress",
                                     str(jobs), "--max-endpoints", str(endpoints)])
        try:
            sm, rt = server.sm, server.client("sagemaker-runtime")
            sm.create_model(ModelName="linear", ExecutionRoleArn=ROLE,
                            PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": (work / "model").as_uri()})
            sm.create_endpoint_config(EndpointConfigName="linear", ProductionVariants=[
                {"VariantName": "AllTraffic", "ModelName": "linear", "InitialInstanceCount": 1,
                 "InstanceType": "ml.m5.large"}])
            names = [f"ep-{i}" for i in range(endpoints)]
            for name in names:
                sm.create_endpoint(EndpointName=name, EndpointConfigName="linear")
            extra_ep = _limit_error(lambda: sm.create_endpoint(EndpointName="ep-extra", EndpointConfigName="linear"))
            checks["endpoint_over_limit_refused"] = extra_ep == "ResourceLimitExceeded"
            for name in names:
                sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig={"Delay": 1,
                                                                                           "MaxAttempts": 300})
            answers = {n: rt.invoke_endpoint(EndpointName=n, ContentType="application/json", Body=BODY)["Body"].read()
                       for n in names}
            checks["endpoints_agree"] = len(set(answers.values())) == 1

            t0 = time.perf_counter()
            _create_job(sm, "reference", inp, work / "out" / "reference")
            ref_doc = _wait_job(sm, "reference")
            single_job_s = time.perf_counter() - t0
            reference = _outputs(work / "out" / "reference")
            checks["reference_completed"] = ref_doc["TransformJobStatus"] == "Completed" and len(reference) == files

            stop = threading.Event()
            invokers = [_Invoker(server.client("sagemaker-runtime"), n, answers[n], stop) for n in names]
            for t in invokers:
                t.start()
            job_names = [f"load-{i:02d}" for i in range(jobs)]
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                create_errors = [f for f in pool.map(lambda n: _limit_error(
                    lambda: _create_job(sm, n, inp, work / "out" / n)), job_names) if f is not None]
            extra_at = time.time()  # taken before the call: a job ended by then surely freed a slot
            extra_job = _limit_error(lambda: _create_job(sm, "load-extra", inp, work / "out" / "load-extra"))
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                docs = list(pool.map(lambda n: _wait_job(sm, n), job_names))
            elapsed = time.perf_counter() - start
            stop.set()
            for t in invokers:
                t.join(timeout=120)
            if extra_job is None:
                _wait_job(sm, "load-extra")
            checks["all_jobs_created"] = not create_errors
            checks["all_completed"] = all(d["TransformJobStatus"] == "Completed" for d in docs)
            mismatched = [n for n in job_names if _outputs(work / "out" / n) != reference]
            checks["outputs_equal_reference"] = not mismatched
            spans = [(d["TransformStartTime"].timestamp(), d["TransformEndTime"].timestamp()) for d in docs]
            peak = _max_overlap(spans)
            checks["never_above_max_concurrent_jobs"] = peak <= max_concurrent
            # Accepted is only right when a job had already ended, freeing a slot under the cap.
            checks["job_over_limit_refused"] = (extra_job == "ResourceLimitExceeded"
                                                or (extra_job is None and min(e for _, e in spans) <= extra_at))
            errors = [e for t in invokers for e in t.errors]
            checks["no_invoke_errors"] = not errors
            ms = np.asarray([m for t in invokers for m in t.ms])
            checks["invokes_made"] = ms.size > 0
        finally:
            server.close()
    return {
        "benchmark": "load", "jobs": jobs, "endpoints": endpoints, "max_concurrent_jobs": max_concurrent,
        "input_files_per_job": files, "lines_per_file": lines,
        "single_job_alone_s": round(single_job_s, 3), "all_jobs_s": round(elapsed, 3),
        "jobs_per_min": round(jobs / elapsed * 60, 2), "peak_jobs_running": peak,
        "invokes": int(ms.size), "invoke_errors": len(errors), "invoke_error_samples": errors[:5],
        "invokes_per_s": round(ms.size / elapsed, 1),
        "invoke_ms": {k: round(float(np.percentile(ms, q)), 3) for k, q in (("p50", 50), ("p90", 90), ("p99", 99))}
        if ms.size else {},
        "extra_endpoint": extra_ep, "extra_job": extra_job, "create_errors": create_errors,
        "mismatched_jobs": mismatched, "checks": checks, "passed": all(checks.values()),
        "machine": platform.platform(), "cpus": os.cpu_count(), "load_average_after": os.getloadavg(),
    }


def _markdown(r: dict, command: str) -> str:
    inv = r["invoke_ms"]
    rows = "\n".join(f"| {k} | {'yes' if v else '**NO**'} |" for k, v in r["checks"].items())
    return f"""# Load: {r['jobs']} transform jobs and {r['endpoints']} endpoints on one `tfbatch api`

```bash
{command}
```

Machine: {r['machine']}, {r['cpus']} CPUs, load average after the run {r['load_average_after'][0]:.1f}.
Each job: the linear test model over {r['input_files_per_job']} JSON-lines files of
{r['lines_per_file']} lines (local `file://` folders); `--max-concurrent-jobs {r['max_concurrent_jobs']}`,
`--max-jobs-in-progress {r['jobs']}`, `--max-endpoints {r['endpoints']}`.

| figure | value |
| --- | --- |
| one job alone (create -> Completed via waiter) | {r['single_job_alone_s']} s |
| all {r['jobs']} jobs (first create -> last Completed) | {r['all_jobs_s']} s |
| throughput | {r['jobs_per_min']} jobs/min |
| most jobs running at once (Describe start/end) | {r['peak_jobs_running']} (limit {r['max_concurrent_jobs']}) |
| InvokeEndpoint calls during the jobs | {r['invokes']} ({r['invokes_per_s']}/s, {r['endpoints']} client threads) |
| invoke P50 / P90 / P99 | {inv.get('p50')} / {inv.get('p90')} / {inv.get('p99')} ms |
| invoke errors | {r['invoke_errors']} |
| endpoint over the limit | {r['extra_endpoint']} |
| job over the limit | {r['extra_job']} |

| check | passed |
| --- | --- |
{rows}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--endpoints", type=int, default=4)
    parser.add_argument("--max-concurrent-jobs", type=int, default=4)
    parser.add_argument("--files", type=int, default=10, help="input files per job")
    parser.add_argument("--lines", type=int, default=50, help="lines per input file")
    parser.add_argument("--out", default=None, help="folder for load.json and load.md")
    args = parser.parse_args(argv)
    report = run(args.jobs, args.endpoints, args.max_concurrent_jobs, args.files, args.lines)
    command = "PYTHONPATH=src:. .venv/bin/python -m benchmarks.apiserver.load " + " ".join(
        argv if argv is not None else sys.argv[1:])
    report["command"] = command
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out, "load.json").write_text(json.dumps(report, indent=2) + "\n")
        Path(args.out, "load.md").write_text(_markdown(report, command))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
