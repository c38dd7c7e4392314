"""SageMaker Models: Create/Describe/List/Delete. A model here is its artifact's location
(``ModelDataUrl``, s3:// or file://) and environment; nothing is loaded until a job or an
endpoint uses it, as on AWS, where CreateModel only records the container definition."""

from __future__ import annotations

import time

from tfbatch.apiserver.listing import page
from tfbatch.apiserver.protocol import not_found, validation
from tfbatch.apiserver.registry import Context, operation

KIND = "model"


def model_data_url(container: dict, where: str) -> str:
    """The artifact location of a container definition, or a ValidationException naming the field."""
    url = container.get("ModelDataUrl")
    source = (container.get("ModelDataSource") or {}).get("S3DataSource") or {}
    if not url and source.get("S3Uri"):
        url = source["S3Uri"]
    if not url:
        raise validation(f"{where}.ModelDataUrl is required by tfbatch: the model.tar.gz (s3://... or "
                         "file://...) that jobs and endpoints run")
    if not url.startswith(("s3://", "file://", "/")):
        raise validation(f"{where}.ModelDataUrl must be an s3:// or file:// URI, got {url!r}")
    return url


def containers_of(params: dict) -> list[tuple[str, dict]]:
    if params.get("PrimaryContainer"):
        return [("PrimaryContainer", params["PrimaryContainer"])]
    return [(f"Containers.{i + 1}", c) for i, c in enumerate(params.get("Containers") or [])]


def get_model(ctx: Context, name: str) -> dict:
    doc = ctx.state.get(KIND, name)
    if doc is None:
        raise not_found("model", name, ctx.arn("model", name))
    return doc


@operation("sagemaker", "CreateModel")
def create_model(ctx: Context, params: dict) -> dict:
    name = params["ModelName"]
    containers = containers_of(params)
    if not containers:
        raise validation("CreateModel needs PrimaryContainer or Containers with a ModelDataUrl")
    if len(containers) > 1:
        raise validation("tfbatch runs one container per model: give PrimaryContainer (or one entry in "
                         f"Containers), got {len(containers)} containers")
    where, container = containers[0]
    model_data_url(container, where)
    arn = ctx.arn("model", name)
    doc = {key: params[key] for key in ("ModelName", "PrimaryContainer", "Containers", "ExecutionRoleArn",
                                         "InferenceExecutionConfig", "VpcConfig", "EnableNetworkIsolation",
                                         "DeploymentRecommendation") if key in params}
    doc.update(ModelArn=arn, CreationTime=time.time())
    doc.setdefault("EnableNetworkIsolation", False)
    if not ctx.state.insert(KIND, name, arn, doc):
        raise validation(f'Cannot create already existing model "{arn}".')
    if params.get("Tags"):
        ctx.state.set_tags(arn, {t["Key"]: t["Value"] for t in params["Tags"]})
    return {"ModelArn": arn}


@operation("sagemaker", "DescribeModel")
def describe_model(ctx: Context, params: dict) -> dict:
    return get_model(ctx, params["ModelName"])


@operation("sagemaker", "DeleteModel")
def delete_model(ctx: Context, params: dict) -> dict:
    name = params["ModelName"]
    doc = ctx.state.get(KIND, name)
    if doc is None:
        raise not_found("model", name, ctx.arn("model", name))
    ctx.state.delete(KIND, name)
    ctx.state.delete_tags(doc["ModelArn"])
    return {}


@operation("sagemaker", "ListModels")
def list_models(ctx: Context, params: dict) -> dict:
    items, token = page(ctx.state.list(KIND), params, name_key="ModelName")
    out = {"Models": [{k: m[k] for k in ("ModelName", "ModelArn", "CreationTime")} for m in items]}
    if token:
        out["NextToken"] = token
    return out

