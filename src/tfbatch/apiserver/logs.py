"""CloudWatch Logs, the part SageMaker clients read: DescribeLogStreams, GetLogEvents,
FilterLogEvents (and DescribeLogGroups), over the events the server writes for its jobs and
endpoints (``/aws/sagemaker/TransformJobs``, ``/aws/sagemaker/Endpoints``).

Tokens follow AWS's shape: GetLogEvents answers ``f/<id>`` and ``b/<id>``, and gives back
the token it was handed when there is nothing newer, which is how the SageMaker SDK's log
tailer knows it has caught up. A log group exists once something has written to it; before
that, AWS's ResourceNotFoundException, on which the SDK waits and retries.
"""

from __future__ import annotations

import shlex
from typing import Any

from tfbatch.apiserver.protocol import ApiError
from tfbatch.apiserver.registry import Context, operation


def _group(ctx: Context, params: dict) -> str:
    group = params.get("logGroupName") or (params.get("logGroupIdentifier") or "").rsplit(":log-group:", 1)[-1]
    if not group:
        raise ApiError("InvalidParameterException", "logGroupName or logGroupIdentifier is required")
    if group not in ctx.state.log_groups():
        raise ApiError("ResourceNotFoundException", "The specified log group does not exist.")
    return group


def _int_token(token: str | None, prefix: str = "") -> int | None:
    if not token:
        return None
    body = token[len(prefix):] if prefix and token.startswith(prefix) else token
    if not body.isdigit():
        raise ApiError("InvalidParameterException", f"The specified nextToken is invalid: {token[:64]!r}")
    return int(body)


@operation("logs", "DescribeLogGroups")
def describe_log_groups(ctx: Context, params: dict) -> dict:
    prefix = params.get("logGroupNamePrefix", "")
    groups = [g for g in ctx.state.log_groups() if g.startswith(prefix)]
    return {"logGroups": [{"logGroupName": g, "arn": f"arn:aws:logs:{ctx.region}:{ctx.account}:log-group:{g}:*",
                           "storedBytes": 0} for g in groups[: params.get("limit", 50)]]}


@operation("logs", "DescribeLogStreams")
def describe_log_streams(ctx: Context, params: dict) -> dict:
    group = _group(ctx, params)
    prefix = params.get("logStreamNamePrefix", "")
    if prefix and params.get("orderBy") == "LastEventTime":
        raise ApiError("InvalidParameterException", "Cannot order by LastEventTime with a logStreamNamePrefix.")
    streams = ctx.state.log_streams(group, prefix)
    if params.get("orderBy") == "LastEventTime":
        streams.sort(key=lambda s: (s["last_ts"] or 0, s["stream"]))
    if params.get("descending"):
        streams.reverse()
    start = _int_token(params.get("nextToken")) or 0
    limit = params.get("limit", 50)
    chosen = streams[start:start + limit]
    out: dict[str, Any] = {"logStreams": [_stream(ctx, group, s) for s in chosen]}
    if start + limit < len(streams):
        out["nextToken"] = str(start + limit)
    return out


def _stream(ctx: Context, group: str, s: dict) -> dict:
    doc = {"logStreamName": s["stream"], "creationTime": s["created"],
           "arn": f"arn:aws:logs:{ctx.region}:{ctx.account}:log-group:{group}:log-stream:{s['stream']}",
           "storedBytes": 0}
    for key, name in (("first_ts", "firstEventTimestamp"), ("last_ts", "lastEventTimestamp"),
                      ("last_ingest", "lastIngestionTime")):
        if s[key] is not None:
            doc[name] = s[key]
    return doc


@operation("logs", "GetLogEvents")
def get_log_events(ctx: Context, params: dict) -> dict:
    group = _group(ctx, params)
    stream = params["logStreamName"]
    if not ctx.state.log_streams(group, stream) or stream not in {s["stream"] for s in
                                                                  ctx.state.log_streams(group, stream)}:
        raise ApiError("ResourceNotFoundException", "The specified log stream does not exist.")
    limit = params.get("limit", 10000)
    token = params.get("nextToken")
    window = {"start_ms": params.get("startTime"), "end_ms": params.get("endTime")}
    if token and token.startswith("b/"):
        before = _int_token(token, "b/")
        rows = list(reversed(ctx.state.log_events(group, [stream], before_id=before, limit=limit, descending=True,
                                                  **window)))
    elif token:
        after = _int_token(token, "f/") or 0
        rows = ctx.state.log_events(group, [stream], after_id=after, limit=limit, **window)
    elif params.get("startFromHead"):
        rows = ctx.state.log_events(group, [stream], limit=limit, **window)
    else:  # AWS's default: the newest events, oldest of them first
        rows = list(reversed(ctx.state.log_events(group, [stream], limit=limit, descending=True, **window)))
    if rows:
        forward, backward = f"f/{rows[-1][0]}", f"b/{rows[0][0]}"
    else:
        forward = token if token and token.startswith("f/") else "f/0"
        backward = token if token and token.startswith("b/") else "b/0"
    return {"events": [{"timestamp": ts, "message": msg, "ingestionTime": ingest} for _i, _s, ts, ingest, msg in rows],
            "nextForwardToken": forward, "nextBackwardToken": backward}


def _matcher(pattern: str | None):
    """CloudWatch's plain term patterns: every term (or "quoted phrase") must appear; empty
    matches all. JSON and space-delimited patterns ({...}, [...]) are not supported."""
    if not pattern or not pattern.strip():
        return lambda message: True
    if pattern.strip()[:1] in "{[":
        raise ApiError("InvalidParameterException", "tfbatch api supports term filter patterns only "
                       f"(words and \"quoted phrases\"), not {pattern[:40]!r}")
    try:
        terms = shlex.split(pattern)
    except ValueError as exc:
        raise ApiError("InvalidParameterException", f"Invalid filter pattern {pattern[:40]!r}: {exc}") from None
    return lambda message: all(term in message for term in terms)


@operation("logs", "FilterLogEvents")
def filter_log_events(ctx: Context, params: dict) -> dict:
    group = _group(ctx, params)
    names = params.get("logStreamNames")
    prefix = params.get("logStreamNamePrefix")
    if names and prefix:
        raise ApiError("InvalidParameterException", "logStreamNames and logStreamNamePrefix cannot both be given")
    if prefix is not None:
        names = [s["stream"] for s in ctx.state.log_streams(group, prefix)]
    match = _matcher(params.get("filterPattern"))
    limit = params.get("limit", 10000)
    after = _int_token(params.get("nextToken")) or 0
    found: list[tuple] = []
    last_seen = after
    while len(found) < limit:
        rows = ctx.state.log_events(group, names, after_id=last_seen, start_ms=params.get("startTime"),
                                    end_ms=params.get("endTime"), limit=1000)
        if not rows:
            break
        for row in rows:
            last_seen = row[0]
            if match(row[4]):
                found.append(row)
                if len(found) == limit:
                    break
    out: dict[str, Any] = {"events": [
        {"logStreamName": s, "timestamp": ts, "message": msg, "ingestionTime": ingest, "eventId": str(i)}
        for i, s, ts, ingest, msg in found]}
    more = ctx.state.log_events(group, names, after_id=last_seen, start_ms=params.get("startTime"),
                                end_ms=params.get("endTime"), limit=1)
    if more:
        out["nextToken"] = str(last_seen)
    return out
