"""An output prefix that is, or contains, the input prefix is refused before any work."""

from __future__ import annotations

import os

import pytest

from tfbatch.errors import ConfigError
from tfbatch.transform.spec import TransformSpec


@pytest.mark.parametrize(
    "inp, out, where",
    [
        ("s3://b/data/", "s3://b/data/", "is the input prefix"),
        ("s3://b/data", "s3://b/data/", "is the input prefix"),
        ("s3://b/data/", "s3://b/", "contains the input prefix"),
        ("s3://b/data/img", "s3://b/data", "contains the input prefix"),
    ],
)
def test_output_at_or_above_the_input_is_refused_naming_both(inp, out, where):
    with pytest.raises(ConfigError) as info:
        TransformSpec.build(model="m", input=inp, output=out)
    msg = str(info.value)
    assert f"output prefix {out!r} {where} {inp!r}" in msg


def test_local_paths_compare_resolved(tmp_path):
    (tmp_path / "in").mkdir()
    os.symlink(tmp_path / "in", tmp_path / "alias")
    with pytest.raises(ConfigError, match="is the input prefix"):
        TransformSpec.build(model="m", input=str(tmp_path / "in"), output=f"file://{tmp_path}/alias/")


@pytest.mark.parametrize(
    "inp, out",
    [
        ("s3://b/data/", "s3://b/data/out/"),  # inside: the planner leaves it out of the inputs
        ("s3://b/data", "s3://b/data-out/"),
        ("s3://b/in/", "s3://b/out/"),
        ("s3://b/in/", "s3://other/in/"),
    ],
)
def test_output_beside_or_inside_the_input_is_accepted(inp, out):
    assert TransformSpec.build(model="m", input=inp, output=out).output == out

