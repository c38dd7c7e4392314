"""SageMaker's endpoint operations: EndpointConfig and Endpoint, with AWS's messages and statuses.

Requests arrive validated against botocore's input shapes (``protocol``); what is checked here
is what the model cannot say: that names exist or are free, that an endpoint is not moving
already. The documents stored are the Describe answers (keys starting with ``_`` are this
server's own bookkeeping and never leave it). Processes are the ``endpoint_workers`` component's.
"""

from __future__ import annotations

import time
from typing import Any

from tfbatch.apiserver.endpoint_workers import ENDPOINT, ENDPOINT_CONFIG, EndpointWorkers
from tfbatch.apiserver.listing import page
from tfbatch.apiserver.models import KIND as MODEL
from tfbatch.apiserver.models import containers_of, model_data_url
from tfbatch.apiserver.protocol import ApiError, not_found, validation
from tfbatch.apiserver.registry import Context, component, operation

COMPONENT = "endpoints"
# Serve processes are whole model servers: past this many endpoints CreateEndpoint answers
# ResourceLimitExceeded (AWS's own per-account quota answer) instead of exhausting the machine.
DEFAULT_MAX_ENDPOINTS = 8
BUSY = ("Creating", "Updating", "SystemUpdating", "RollingBack", "Deleting")


def public(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def model_container(state: Any, name: str) -> dict[str, Any]:
    """The ModelDataUrl and Environment a serve process needs, from the stored model."""
    model = state.get(MODEL, name)
    if model is None:
        raise validation(f'Could not find model "{name}": it was deleted after the endpoint configuration '
                         "that names it was created")
    where, container = containers_of(model)[0]
    return {"ModelDataUrl": model_data_url(container, where), "Environment": container.get("Environment") or {}}


@component(COMPONENT)
def _start(config: Any, state: Any) -> EndpointWorkers:
    workers = EndpointWorkers(state, config.state_dir / "endpoints", lambda name: model_container(state, name))
    workers.recover()
    return workers


def _workers(ctx: Context) -> EndpointWorkers:
    return ctx.components[COMPONENT]


def _tags(ctx: Context, arn: str, tags: list[dict[str, str]] | None) -> None:
    if tags:
        ctx.state.set_tags(arn, {t["Key"]: t.get("Value", "") for t in tags})


# -- EndpointConfig ---------------------------------------------------------------------------

@operation("sagemaker", "CreateEndpointConfig")
def create_endpoint_config(ctx: Context, params: dict) -> dict:
    name = params["EndpointConfigName"]
    arn = ctx.arn("endpoint-config", name)
    names = [v["VariantName"] for v in params["ProductionVariants"]]
    if len(set(names)) != len(names):
        raise validation(f"ProductionVariants must have unique VariantNames, got {names}")
    for variant in params["ProductionVariants"]:
        if not variant.get("ModelName"):
            raise validation(f"ProductionVariant {variant['VariantName']} needs a ModelName")
        if ctx.state.get(MODEL, variant["ModelName"]) is None:
            raise validation(f'Could not find model "{ctx.arn("model", variant["ModelName"])}".')
    if params.get("AsyncInferenceConfig") or params.get("ShadowProductionVariants"):
        raise validation("tfbatch api serves real-time endpoints: AsyncInferenceConfig and "
                         "ShadowProductionVariants are not supported")
    doc = {k: v for k, v in params.items() if k != "Tags"}
    doc.update(EndpointConfigArn=arn, CreationTime=time.time())
    if not ctx.state.insert(ENDPOINT_CONFIG, name, arn, doc):
        raise validation(f'Cannot create already existing endpoint configuration "{arn}".')
    _tags(ctx, arn, params.get("Tags"))
    return {"EndpointConfigArn": arn}


@operation("sagemaker", "DescribeEndpointConfig")
def describe_endpoint_config(ctx: Context, params: dict) -> dict:
    name = params["EndpointConfigName"]
    doc = ctx.state.get(ENDPOINT_CONFIG, name)
    if doc is None:
        raise not_found("endpoint configuration", name, ctx.arn("endpoint-config", name))
    return public(doc)


@operation("sagemaker", "ListEndpointConfigs")
def list_endpoint_configs(ctx: Context, params: dict) -> dict:
    items, token = page(ctx.state.list(ENDPOINT_CONFIG), params, name_key="EndpointConfigName")
    out: dict[str, Any] = {"EndpointConfigs": [
        {k: d[k] for k in ("EndpointConfigName", "EndpointConfigArn", "CreationTime")} for d in items]}
    if token:
        out["NextToken"] = token
    return out


@operation("sagemaker", "DeleteEndpointConfig")
def delete_endpoint_config(ctx: Context, params: dict) -> dict:
    # AWS lets a config be deleted while endpoints use it (they keep running); so does this.
    name = params["EndpointConfigName"]
    arn = ctx.arn("endpoint-config", name)
    if not ctx.state.delete(ENDPOINT_CONFIG, name):
        raise not_found("endpoint configuration", name, arn)
    ctx.state.delete_tags(arn)
    return {}


# -- Endpoint ---------------------------------------------------------------------------------

def _config_or_fail(ctx: Context, name: str) -> dict[str, Any]:
    config = ctx.state.get(ENDPOINT_CONFIG, name)
    if config is None:
        raise validation(f'Could not find endpoint configuration "{ctx.arn("endpoint-config", name)}".')
    return config


@operation("sagemaker", "CreateEndpoint")
def create_endpoint(ctx: Context, params: dict) -> dict:
    name = params["EndpointName"]
    arn = ctx.arn("endpoint", name)
    _config_or_fail(ctx, params["EndpointConfigName"])
    limit = getattr(ctx.config, "max_endpoints", DEFAULT_MAX_ENDPOINTS)
    if len(ctx.state.list(ENDPOINT)) >= limit:
        raise ApiError("ResourceLimitExceeded", f"The account-level service limit 'number of endpoints' is {limit} "
                       f"Endpoints; tfbatch api --max-endpoints raises it", 400)
    now = time.time()
    doc = {"EndpointName": name, "EndpointArn": arn, "EndpointConfigName": params["EndpointConfigName"],
           "EndpointStatus": "Creating", "CreationTime": now, "LastModifiedTime": now}
    if not ctx.state.insert(ENDPOINT, name, arn, doc):
        raise validation(f'Cannot create already existing endpoint "{arn}".')
    _tags(ctx, arn, params.get("Tags"))
    _workers(ctx).create(name)
    return {"EndpointArn": arn}


def _endpoint_or_fail(ctx: Context, name: str) -> dict[str, Any]:
    doc = ctx.state.get(ENDPOINT, name)
    if doc is None:  # botocore's endpoint_deleted waiter succeeds on exactly this answer
        raise not_found("endpoint", name, ctx.arn("endpoint", name))
    return doc


@operation("sagemaker", "DescribeEndpoint")
def describe_endpoint(ctx: Context, params: dict) -> dict:
    return public(_endpoint_or_fail(ctx, params["EndpointName"]))


@operation("sagemaker", "UpdateEndpoint")
def update_endpoint(ctx: Context, params: dict) -> dict:
    name = params["EndpointName"]
    doc = _endpoint_or_fail(ctx, name)
    if doc["EndpointStatus"] != "InService":
        raise validation(f'Cannot update in-progress endpoint "{doc["EndpointArn"]}".'
                         if doc["EndpointStatus"] in BUSY else
                         f'Cannot update endpoint "{doc["EndpointArn"]}" in status {doc["EndpointStatus"]}.')
    _config_or_fail(ctx, params["EndpointConfigName"])
    ctx.state.update(ENDPOINT, name, EndpointStatus="Updating", _TargetConfig=params["EndpointConfigName"],
                     LastModifiedTime=time.time())
    _workers(ctx).update(name)
    return {"EndpointArn": doc["EndpointArn"]}


@operation("sagemaker", "DeleteEndpoint")
def delete_endpoint(ctx: Context, params: dict) -> dict:
    name = params["EndpointName"]
    doc = _endpoint_or_fail(ctx, name)
    if doc["EndpointStatus"] == "Deleting":
        return {}
    ctx.state.update(ENDPOINT, name, EndpointStatus="Deleting", LastModifiedTime=time.time())
    ctx.state.delete_tags(doc["EndpointArn"])
    _workers(ctx).delete(name)
    return {}


@operation("sagemaker", "ListEndpoints")
def list_endpoints(ctx: Context, params: dict) -> dict:
    items, token = page(ctx.state.list(ENDPOINT), params, name_key="EndpointName", status_key="EndpointStatus",
                        sort_keys={"Name": "EndpointName", "CreationTime": "CreationTime", "Status": "EndpointStatus"})
    out: dict[str, Any] = {"Endpoints": [
        {k: d[k] for k in ("EndpointName", "EndpointArn", "CreationTime", "LastModifiedTime", "EndpointStatus")}
        for d in items]}
    if token:
        out["NextToken"] = token
    return out
