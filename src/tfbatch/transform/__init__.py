"""Batch transform: SageMaker's CreateTransformJob semantics, run locally and faster.

``run_job(spec, engine)`` runs a job on the Engine it is given; ``plan_transform`` shows
what a run would do. Users call ``tfbatch.run_transform``, which picks the engine.

The names below load on first use: ``tfbatch``'s parser imports ``tfbatch.transform.cli``
for the flags, and ``tfbatch serve`` or ``--help`` should not pay for the job machinery.
"""

from __future__ import annotations

from tfbatch.lazy import lazy_names

_LAZY = {
    "Engine": "tfbatch.transform.engine",
    "JobReport": "tfbatch.transform.report",
    "ObjectResult": "tfbatch.transform.report",
    "RecordFailure": "tfbatch.transform.report",
    "TransformSpec": "tfbatch.transform.spec",
    "plan_transform": "tfbatch.transform.job",
    "run_job": "tfbatch.transform.job",
    "spec_from_create_transform_job": "tfbatch.transform.spec",
}
__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
