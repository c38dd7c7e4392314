"""What a transform job needs from the place its instances run.

The job (``tfbatch.transform.job.run_job``) plans, keeps the ledger and writes the report;
an engine only runs the instances and hands back each object's result as it finishes. The
engine is a value the caller passes in — ``tfbatch.engines.local.LocalEngine()`` or
``tfbatch.engines.ray.RayEngine(RayOptions(...))`` — carrying its own options, so nothing
about where work runs is found through a global.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from tfbatch.transform.report import InstanceSummary, ObjectResult
from tfbatch.transform.spec import TransformSpec

# Called once per finished object, from whichever thread the engine collects results on.
Emit = Callable[[ObjectResult], None]


@runtime_checkable
class Engine(Protocol):
    """Runs ``spec.instance_count`` instances over the job's objects.

    Contract: every object of instance *i*'s partition (``plan.instance_of``) goes through
    ``InstanceRunner``'s pipeline exactly once per attempt, each result is passed to ``emit``,
    and the return value holds one summary per instance, in instance order, with ``fatal``
    set for an instance that could not run. Once ``stop`` is set (the job's error-rate guard
    tripped) instances take no new objects, finish what they hold, and return.

    ``inputs`` (optional: an engine whose ``run`` has no such parameter still works, and the
    job then counts the input for the progress bar in a pass of its own): the job's single
    listing pass, a ``plan.JobInputs`` yielding ``(instance, ref)`` with done objects already
    dropped. An engine that takes it must not list the input again; given None it makes its
    own ``JobInputs`` from the spec and the ledger.
    """

    @property
    def name(self) -> str:
        """What ``TransformSpec.engine`` calls this engine (``local``, ``ray``)."""
        ...

    def run(self, spec: TransformSpec, emit: Emit, stop: threading.Event | None = None
            ) -> list[InstanceSummary]: ...


def takes_inputs(engine: Engine) -> bool:
    """Whether ``engine.run`` accepts the job's listing pass as ``inputs``."""
    import inspect

    try:
        return "inputs" in inspect.signature(engine.run).parameters
    except (TypeError, ValueError):
        return False
