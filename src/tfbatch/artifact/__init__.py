"""Model artifacts: safe extraction, model/version discovery, inspection, packaging (COMPAT.md §1)."""

from tfbatch.artifact.discover import Artifact, ModelEntry, discover, open_artifact
from tfbatch.artifact.extract import safe_extract
from tfbatch.artifact.inspect import format_inspect, inspect_artifact
from tfbatch.artifact.package import package

__all__ = [
    "Artifact",
    "ModelEntry",
    "discover",
    "format_inspect",
    "inspect_artifact",
    "open_artifact",
    "package",
    "safe_extract",
]
