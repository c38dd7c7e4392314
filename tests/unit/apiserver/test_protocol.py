"""Requests validated and answers shaped from botocore's service models, without a server."""

from __future__ import annotations

import datetime as dt

import pytest

from tfbatch.apiserver.listing import page
from tfbatch.apiserver.protocol import ApiError, serialize, service_model, validate_input


def _op(name: str, service: str = "sagemaker"):
    return service_model(service).operation_model(name)


def _problem(name: str, params: dict, service: str = "sagemaker") -> str:
    with pytest.raises(ApiError) as info:
        validate_input(_op(name, service), params)
    assert info.value.code == "ValidationException" and info.value.status == 400
    return info.value.message


def test_required_members_are_named_with_their_path():
    message = _problem("CreateTransformJob", {"TransformJobName": "j"})
    assert message.startswith("4 validation errors detected")
    for path in ("'modelName'", "'transformInput'", "'transformOutput'", "'transformResources'"):
        assert f"Value 'null' at {path} failed to satisfy constraint: Member must not be null" in message


def test_enum_pattern_length_and_range():
    assert "Member must satisfy enum value set" in _problem("ListTransformJobs", {"StatusEquals": "Running"})
    assert "'modelName'" in _problem("DescribeModel", {"ModelName": "has space"})
    assert "length less than or equal to 63" in _problem("DescribeModel", {"ModelName": "m" * 64})
    assert "greater than or equal to 1" in _problem("ListModels", {"MaxResults": 0})
    message = _problem("CreateTransformJob", {
        "TransformJobName": "j", "ModelName": "m",
        "TransformInput": {"DataSource": {"S3DataSource": {"S3DataType": "Bogus", "S3Uri": "s3://b/in"}}},
        "TransformOutput": {"S3OutputPath": "s3://b/out"},
        "TransformResources": {"InstanceType": "ml.m5.large", "InstanceCount": 1}})
    assert "'transformInput.dataSource.s3DataSource.s3DataType'" in message


def test_types_and_unknown_members():
    assert "Member must be an integer" in _problem("ListModels", {"MaxResults": "10"})
    assert "Unknown parameter 'bogus'" in _problem("ListModels", {"Bogus": 1})
    with pytest.raises(ApiError) as info:
        validate_input(_op("ListModels"), ["not", "an", "object"])
    assert info.value.code == "SerializationException"


def test_file_uris_are_accepted_where_tfbatch_reads_local_folders():
    validate_input(_op("CreateModel"), {"ModelName": "m", "PrimaryContainer": {"ModelDataUrl": "file:///models/m"}})
    ftp = {"ModelName": "m", "PrimaryContainer": {"ModelDataUrl": "ftp://x"}}
    assert "modelDataUrl" in _problem("CreateModel", ftp)


def test_logs_model_too():
    assert "'logGroupName'" in _problem("GetLogEvents", {"logGroupName": "", "logStreamName": "s"}, service="logs")


def test_answers_are_serialized_from_the_output_shape():
    op = _op("DescribeModel")
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    out = serialize(op.output_shape, {"ModelName": "m", "ModelArn": "arn", "CreationTime": when,
                                      "PrimaryContainer": {"ModelDataUrl": "s3://b/m.tar.gz"}})
    assert out["CreationTime"] == when.timestamp()
    with pytest.raises(KeyError):
        serialize(op.output_shape, {"ModelName": "m", "NotAMember": 1})


def test_paging_token_keeps_position_across_deletes():
    items = [{"ModelName": f"m{i}", "CreationTime": float(i)} for i in range(5)]
    first, token = page(items, {"MaxResults": 2}, name_key="ModelName")
    assert [i["ModelName"] for i in first] == ["m4", "m3"] and token
    rest, token2 = page([i for i in items if i["ModelName"] != "m3"], {"MaxResults": 5, "NextToken": token},
                        name_key="ModelName")
    assert [i["ModelName"] for i in rest] == ["m2", "m1", "m0"] and token2 is None
    with pytest.raises(ApiError):
        page(items, {"NextToken": "!!!"}, name_key="ModelName")
