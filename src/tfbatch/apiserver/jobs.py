"""SageMaker transform jobs: Create/Describe/List/Stop TransformJob.

The stored document is the DescribeTransformJob answer; the ``jobs`` component
(``runner.JobQueue``) runs it and moves its status InProgress -> Completed | Failed, or
Stopping -> Stopped. Describe of a job that does not exist is AWS's 400 ValidationException
"Could not find job ...", which botocore's ``transform_job_completed_or_stopped`` waiter
treats as a failure, as against AWS.
"""

from __future__ import annotations

import time

from tfbatch.apiserver import runner  # noqa: F401 - registers the ``jobs`` component
from tfbatch.apiserver.jobspec import spec_for_job
from tfbatch.apiserver.listing import page
from tfbatch.apiserver.protocol import ApiError, validation
from tfbatch.apiserver.registry import Context, operation
from tfbatch.apiserver.runner import ACTIVE, KIND

# The request members kept in the Describe answer as given.
_ECHOED = ("TransformJobName", "ModelName", "MaxConcurrentTransforms", "ModelClientConfig", "MaxPayloadInMB",
           "BatchStrategy", "Environment", "TransformInput", "TransformOutput", "DataCaptureConfig",
           "TransformResources", "DataProcessing", "ExperimentConfig")


def _missing(ctx: Context, name: str) -> ApiError:
    return validation(f'Could not find job "{ctx.arn("transform-job", name)}".')


@operation("sagemaker", "CreateTransformJob")
def create_transform_job(ctx: Context, params: dict) -> dict:
    name = params["TransformJobName"]
    model = ctx.state.get("model", params["ModelName"])
    if model is None:
        raise validation(f'Could not find model "{ctx.arn("model", params["ModelName"])}".')
    spec_for_job(params, model)  # refuse now what could never run
    arn = ctx.arn("transform-job", name)
    now = time.time()
    doc = {k: params[k] for k in _ECHOED if k in params}
    doc.update(TransformJobArn=arn, TransformJobStatus="InProgress", CreationTime=now, LastModifiedTime=now)
    doc.setdefault("TransformResources", {}).setdefault("InstanceCount", 1)
    doc.setdefault("MaxPayloadInMB", 6)
    doc.setdefault("BatchStrategy", "SingleRecord")
    with ctx.state.transaction():  # count and insert as one step: two creates cannot both pass the cap
        active = sum(1 for job in ctx.state.list(KIND) if job["TransformJobStatus"] in ACTIVE)
        if active >= ctx.config.max_jobs_in_progress:
            raise ApiError("ResourceLimitExceeded", f"{active} transform jobs are in progress, the most this "
                           f"server takes (--max-jobs-in-progress {ctx.config.max_jobs_in_progress}); wait for one "
                           "to end")
        if not ctx.state.insert(KIND, name, arn, doc, created=now):
            raise ApiError("ResourceInUse", f"Job name must be unique within an AWS account and region, and a job "
                           f"with this name already exists ({arn})")
    if params.get("Tags"):
        ctx.state.set_tags(arn, {t["Key"]: t["Value"] for t in params["Tags"]})
    ctx.components["jobs"].submit(name)
    return {"TransformJobArn": arn}


@operation("sagemaker", "DescribeTransformJob")
def describe_transform_job(ctx: Context, params: dict) -> dict:
    doc = ctx.state.get(KIND, params["TransformJobName"])
    if doc is None:
        raise _missing(ctx, params["TransformJobName"])
    doc.pop("LastModifiedTime", None)  # a ListTransformJobs member, not a Describe one
    return doc


@operation("sagemaker", "StopTransformJob")
def stop_transform_job(ctx: Context, params: dict) -> dict:
    name = params["TransformJobName"]
    doc = ctx.state.get(KIND, name)
    if doc is None:
        raise _missing(ctx, name)
    status = doc["TransformJobStatus"]
    if status not in ("InProgress", "Stopping"):
        # What AWS answers for a job that has already ended.
        raise validation(f"Transform job {doc['TransformJobArn']} is in status {status}: only InProgress "
                         "jobs can be stopped")
    ctx.components["jobs"].stop(name)
    return {}


@operation("sagemaker", "ListTransformJobs")
def list_transform_jobs(ctx: Context, params: dict) -> dict:
    items, token = page(ctx.state.list(KIND), params, name_key="TransformJobName", status_key="TransformJobStatus",
                        sort_keys={"Name": "TransformJobName", "CreationTime": "CreationTime",
                                   "Status": "TransformJobStatus"})
    keys = ("TransformJobName", "TransformJobArn", "CreationTime", "TransformEndTime", "LastModifiedTime",
            "TransformJobStatus", "FailureReason")
    out = {"TransformJobSummaries": [{k: job[k] for k in keys if k in job} for job in items]}
    if token:
        out["NextToken"] = token
    return out
