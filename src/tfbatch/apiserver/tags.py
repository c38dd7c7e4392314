"""AddTags / ListTags / DeleteTags on any resource this server holds, by ARN."""

from __future__ import annotations

from tfbatch.apiserver.listing import _decode, _encode
from tfbatch.apiserver.protocol import ApiError, validation
from tfbatch.apiserver.registry import Context, operation

# AWS's own limit on tags per resource.
MAX_TAGS = 50


def _require(ctx: Context, arn: str) -> None:
    if ctx.state.kind_of_arn(arn) is None:
        raise validation(f"Resource {arn} does not exist or is not a resource this server holds")


@operation("sagemaker", "AddTags")
def add_tags(ctx: Context, params: dict) -> dict:
    arn = params["ResourceArn"]
    _require(ctx, arn)
    new = {t["Key"]: t["Value"] for t in params["Tags"]}
    merged = {**ctx.state.tags(arn), **new}
    if len(merged) > MAX_TAGS:
        raise ApiError("ResourceLimitExceeded", f"{arn} would have {len(merged)} tags; at most {MAX_TAGS} are allowed")
    ctx.state.set_tags(arn, new)
    return {"Tags": [{"Key": k, "Value": v} for k, v in new.items()]}


@operation("sagemaker", "DeleteTags")
def delete_tags(ctx: Context, params: dict) -> dict:
    arn = params["ResourceArn"]
    _require(ctx, arn)
    ctx.state.delete_tags(arn, params["TagKeys"])
    return {}


@operation("sagemaker", "ListTags")
def list_tags(ctx: Context, params: dict) -> dict:
    arn = params["ResourceArn"]
    _require(ctx, arn)
    tags = sorted(ctx.state.tags(arn).items())
    if params.get("NextToken"):
        last = _decode(params["NextToken"])[1]
        tags = [t for t in tags if t[0] > last]
    limit = params.get("MaxResults", 50)
    out = {"Tags": [{"Key": k, "Value": v} for k, v in tags[:limit]]}
    if len(tags) > limit:
        out["NextToken"] = _encode([None, tags[limit - 1][0]])
    return out

