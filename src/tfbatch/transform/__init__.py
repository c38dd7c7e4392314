"""Batch transform: SageMaker's CreateTransformJob semantics, run locally and faster.

``run_transform(spec)`` or ``run_transform(model=..., input=..., output=..., ...)`` with the
TransformSpec field names; ``plan_transform`` shows what a run would do.
"""

from tfbatch.transform.job import plan_transform, run_transform
from tfbatch.transform.report import JobReport, ObjectResult, RecordFailure
from tfbatch.transform.spec import TransformSpec, spec_from_create_transform_job

__all__ = [
    "JobReport",
    "ObjectResult",
    "RecordFailure",
    "TransformSpec",
    "plan_transform",
    "run_transform",
    "spec_from_create_transform_job",
]
