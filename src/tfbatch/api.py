"""The Python API of a batch transform: ``tfbatch.run_transform`` and ``tfbatch.plan_transform``.

This is the one place that turns ``TransformSpec.engine`` (a name) into an engine (a value):
it sits above both ``transform``, which runs a job on whatever Engine it is handed, and
``engines``, which implement it, so neither has to know about the other's choice.
"""

from __future__ import annotations

from typing import Any

from tfbatch.engines import get_engine
from tfbatch.transform.engine import Engine
from tfbatch.transform.job import as_spec, plan_transform, run_job
from tfbatch.transform.progress import Progress
from tfbatch.transform.report import JobReport
from tfbatch.transform.spec import TransformSpec

__all__ = ["run_transform", "plan_transform"]


def run_transform(spec: TransformSpec | None = None, *, engine: Engine | None = None,
                  progress: str | Progress | None = None, **fields: Any) -> JobReport:
    """Run a transform job. Give a TransformSpec, or its fields as keyword arguments.

    ``engine``: where the instances run — ``LocalEngine()``, ``RayEngine(RayOptions(...))``
    or any other ``tfbatch.transform.Engine``; None picks one by ``spec.engine``.
    ``progress``: "auto" (a bar on a terminal, else log lines on stderr), "bar", "log",
    a Progress, or None (quiet).
    """
    spec = as_spec(spec, fields)
    if engine is None:
        engine = get_engine(spec.engine)
    elif spec.engine != engine.name:
        # The report and the plan say where the job ran; the engine given is what ran it.
        spec = spec.model_copy(update={"engine": engine.name})
    return run_job(spec, engine, progress=progress)
