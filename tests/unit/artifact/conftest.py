"""Artifact fixtures for the fast tier (no TensorFlow: placeholder SavedModels only)."""

from tests.support.artifact_fixtures import fake_savedmodel, tar_builder  # noqa: F401 - fixtures
