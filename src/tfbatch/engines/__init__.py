"""Where a transform job's instances run: ``local`` (processes here) or ``ray`` (actors on a Ray cluster)."""

from __future__ import annotations

from tfbatch.errors import JobSpecError


def get_engine(name: str):
    """The engine called ``name``; each exposes ``run(spec, emit) -> list[InstanceSummary]``."""
    if name == "local":
        from tfbatch.engines.local import LocalEngine

        return LocalEngine()
    if name == "ray":
        try:
            from tfbatch.engines.ray import RayEngine  # type: ignore[import-not-found]
        except ModuleNotFoundError as exc:
            if exc.name != "tfbatch.engines.ray":
                raise
            raise JobSpecError("engine 'ray' is not available in this build; expected 'local'") from None
        return RayEngine()
    raise JobSpecError(f"unknown engine {name!r}: expected 'local' or 'ray'")
