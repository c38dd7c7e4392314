"""A CreateTransformJob request and its model -> the TransformSpec tfbatch runs.

The mapping of request fields is ``transform.spec.spec_from_create_transform_job`` (the same
one ``tfbatch transform --job`` uses); this adds what only the API knows: the model's
``ModelDataUrl`` and environment, and whether the run resumes an interrupted one. It runs at
CreateTransformJob time too, so a request tfbatch cannot run is refused with a
ValidationException naming the field, instead of a job that fails later.
"""

from __future__ import annotations

import re
from typing import Any

from tfbatch.apiserver.models import containers_of, model_data_url
from tfbatch.apiserver.protocol import validation
from tfbatch.errors import ConfigError

_SPEC_TO_REQUEST = {
    "input": "TransformInput.DataSource.S3DataSource.S3Uri",
    "manifest": "TransformInput.DataSource.S3DataSource.S3Uri (ManifestFile)",
    "output": "TransformOutput.S3OutputPath", "env": "Environment", "content_type": "TransformInput.ContentType",
    "split_type": "TransformInput.SplitType", "compression": "TransformInput.CompressionType",
    "max_payload_mb": "MaxPayloadInMB", "instance_count": "TransformResources.InstanceCount",
    "model": "ModelName (its PrimaryContainer.ModelDataUrl)",
}


def spec_for_job(request: dict[str, Any], model: dict[str, Any], *, resumed: bool = False):
    """The TransformSpec of a stored job; raises a ValidationException (ApiError) naming the field."""
    from tfbatch.transform.spec import TransformSpec, spec_from_create_transform_job

    where, container = containers_of(model)[0]
    try:
        fields = spec_from_create_transform_job(request)
    except ConfigError as exc:
        raise validation(str(exc)) from None
    env = dict(container.get("Environment") or {})
    env.update(fields.get("env") or {})
    fields["env"] = env
    fields["model"] = model_data_url(container, where)
    fields["resume"] = True
    # After a restart the dead run's S3 lease on the output stays until it expires: wait for it.
    fields["wait_lock"] = resumed
    try:
        return TransformSpec.build(**fields)
    except ConfigError as exc:
        # pydantic names TransformSpec's fields; a client knows the request's members.
        text = re.sub(r"(?<=[:;] )(\w+)(?=: )", lambda m: _SPEC_TO_REQUEST.get(m.group(1), m.group(1)), str(exc))
        raise validation(text.replace("invalid transform job", "CreateTransformJob request", 1)) from None
