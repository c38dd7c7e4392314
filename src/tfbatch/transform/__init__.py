"""Batch transform: SageMaker's CreateTransformJob semantics, run locally and faster.

``run_job(spec, engine)`` runs a job on the Engine it is given; ``plan_transform`` shows
what a run would do. Users call ``tfbatch.run_transform``, which picks the engine.
"""

from tfbatch.transform.engine import Engine
from tfbatch.transform.job import plan_transform, run_job
from tfbatch.transform.report import JobReport, ObjectResult, RecordFailure
from tfbatch.transform.spec import TransformSpec, spec_from_create_transform_job

__all__ = [
    "Engine",
    "JobReport",
    "ObjectResult",
    "RecordFailure",
    "TransformSpec",
    "plan_transform",
    "run_job",
    "spec_from_create_transform_job",
]
