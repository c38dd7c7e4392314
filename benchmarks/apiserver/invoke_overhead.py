"""InvokeEndpoint through ``tfbatch api`` against the same call straight to ``tfbatch serve``.

Both paths use the same client (boto3's ``sagemaker-runtime`` ``invoke_endpoint``, which signs
every request with SigV4) and the same tiny model (the linear test model: the model call
costs next to nothing, so what is measured is the serving path). ``tfbatch serve`` answers
SageMaker Runtime's route itself, so the baseline is one hop: client -> serve. Through the API
server it is client -> ``tfbatch api`` (SigV4 check, validation, endpoint lookup) -> the
endpoint's serve process. The calls alternate between the two paths, so load from other work
on a shared machine falls on both alike; the overhead is the difference of the P50s.

    python -m benchmarks.apiserver.invoke_overhead --n 2000 --out benchmarks/apiserver

Target (issue 22): P50 overhead <= 2 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PERCENTILES = (50, 90, 99)
KEY, SECRET = "AKIDBENCH", "bench-secret"


def _wait_file(path: Path, proc: subprocess.Popen, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start (exit {proc.poll()})")
        time.sleep(0.05)
    return json.loads(path.read_text())


def _client(url: str):
    import boto3
    from botocore.config import Config

    return boto3.client("sagemaker-runtime", endpoint_url=url, region_name="us-east-1", aws_access_key_id=KEY,
                        aws_secret_access_key=SECRET, config=Config(retries={"max_attempts": 1}))


def _start_api(work: Path, env: dict[str, str], model_dir: Path) -> tuple[subprocess.Popen, str]:
    import boto3

    from tfbatch.ports import free_ports

    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "tfbatch", "api", "--port", str(port), "--state-dir",
                             str(work / "state")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    sm = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1", aws_access_key_id=KEY,
                      aws_secret_access_key=SECRET)
    deadline = time.monotonic() + 60
    while True:
        try:
            sm.list_endpoints()
            break
        except Exception:  # noqa: BLE001 - not up yet
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    sm.create_model(ModelName="bench", ExecutionRoleArn="arn:aws:iam::000000000000:role/bench",
                    PrimaryContainer={"Image": "tfbatch", "ModelDataUrl": f"file://{model_dir}"})
    sm.create_endpoint_config(EndpointConfigName="bench", ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": "bench", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}])
    sm.create_endpoint(EndpointName="bench", EndpointConfigName="bench")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="bench", WaiterConfig={"Delay": 1, "MaxAttempts": 300})
    return proc, url


def _cpu_ms(pid: int) -> float:
    """User + system CPU a process has used so far (ms): what a request costs, whatever the load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _endpoint_pid(work: Path) -> int:
    ready = next((work / "state" / "endpoints" / "bench").glob("*.ready.json"))
    return int(json.loads(ready.read_text())["pid"])


def _stats(ms: list[float]) -> dict[str, float]:
    arr = np.asarray(ms)
    out = {f"p{p}": round(float(np.percentile(arr, p)), 3) for p in PERCENTILES}
    out["mean"] = round(float(arr.mean()), 3)
    return out


def run(n: int, warmup: int) -> dict:
    from tfbatch.testing.models import make_linear_model

    work = Path(tempfile.mkdtemp(prefix="tfbatch-bench-api-"))
    model_dir = work / "model"
    make_linear_model(model_dir / "1")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
               TF_CPP_MIN_LOG_LEVEL="2")
    ready = work / "serve.json"
    serve = subprocess.Popen([sys.executable, "-m", "tfbatch.serve", str(model_dir), "--port", "0", "--grpc-port",
                              "-1", "--ready-file", str(ready), "--log-level", "warning"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = None
    try:
        serve_url = f"http://127.0.0.1:{_wait_file(ready, serve)['port']}"
        api, api_url = _start_api(work, env, model_dir)
        clients = {"serve": _client(serve_url), "api": _client(api_url)}
        body = json.dumps({"instances": [[1.0, 2.0, 3.0]]}).encode()
        times: dict[str, list[float]] = {"serve": [], "api": []}
        answers = {}
        pids = {"serve": serve.pid, "api": api.pid, "api_endpoint": _endpoint_pid(work)}
        cpu_before: dict[str, float] = {}
        for i in range(warmup + n):
            if i == warmup:
                cpu_before = {name: _cpu_ms(pid) for name, pid in pids.items()}
            for name, client in clients.items():
                start = time.perf_counter()
                answer = client.invoke_endpoint(EndpointName="bench", ContentType="application/json", Body=body)
                payload = answer["Body"].read()
                elapsed = (time.perf_counter() - start) * 1000
                if i >= warmup:
                    times[name].append(elapsed)
                answers[name] = json.loads(payload)
        if answers["api"] != answers["serve"]:
            raise AssertionError(f"the two paths answered differently: {answers}")
        cpu = {name: round((_cpu_ms(pid) - cpu_before[name]) / n, 3) for name, pid in pids.items()}
        stats = {name: _stats(ms) for name, ms in times.items()}
        return {
            "n": n, "warmup": warmup, "client": "boto3 sagemaker-runtime invoke_endpoint (SigV4), sequential",
            "serve_ms": stats["serve"], "api_ms": stats["api"],
            "overhead_p50_ms": round(stats["api"]["p50"] - stats["serve"]["p50"], 3),
            "overhead_p90_ms": round(stats["api"]["p90"] - stats["serve"]["p90"], 3),
            # Server CPU per request (ms): the API server process, the endpoint's serve process
            # behind it, and the bare serve process; a figure the machine's other load does not move.
            "cpu_per_request_ms": cpu,
            "cpu_overhead_per_request_ms": round(cpu["api"] + cpu["api_endpoint"] - cpu["serve"], 3),
            "target_p50_ms": 2.0, "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        }
    finally:
        for proc in (api, serve):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(60)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="timed calls per path")
    p.add_argument("--warmup", type=int, default=50, help="untimed calls per path first")
    p.add_argument("--out", type=Path, help="folder for invoke_overhead.json")
    args = p.parse_args(argv)
    result = run(args.n, args.warmup)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "invoke_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["overhead_p50_ms"] <= result["target_p50_ms"] else 1


if __name__ == "__main__":
    sys.exit(main())
