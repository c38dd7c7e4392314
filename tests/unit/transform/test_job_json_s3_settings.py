"""Job JSON S3 settings are honoured (KmsKeyId) or refused by name (DataCaptureConfig), never dropped."""

from __future__ import annotations

import pytest

from tfbatch.errors import ConfigError
from tfbatch.transform.spec import spec_from_create_transform_job

BASE = {"TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": "s3://b/in"}}},
        "TransformOutput": {"S3OutputPath": "s3://b/out"}}


def test_kms_key_id_is_carried_into_the_spec():
    job = {**BASE, "TransformOutput": {**BASE["TransformOutput"], "KmsKeyId": "alias/outputs"}}
    assert spec_from_create_transform_job(job)["kms_key_id"] == "alias/outputs"


@pytest.mark.parametrize("name", ["DataCaptureConfig", "BatchDataCaptureConfig"])
def test_data_capture_is_refused_by_name(name):
    with pytest.raises(ConfigError, match=name):
        spec_from_create_transform_job({**BASE, name: {"DestinationS3Uri": "s3://b/capture"}})
