"""The input-safety flags reach the job spec, and the record limit names the setting that set it."""

from __future__ import annotations

import argparse

import pytest

from tfbatch.errors import ConfigError
from tfbatch.transform.cli import add_transform_arguments, spec_from_args
from tfbatch.transform.spec import TransformSpec


def parse(*argv: str) -> TransformSpec:
    p = argparse.ArgumentParser()
    add_transform_arguments(p)
    return spec_from_args(p.parse_args(["--model", "m", "--input", "s3://b/in/", "--output", "s3://b/out/", *argv]))


def test_defaults():
    spec = parse()
    assert (spec.max_record_mb, spec.max_image_pixels, spec.follow_symlinks) == (100, 50_000_000, False)
    assert (spec.record_limit.max_bytes, spec.record_limit.setting) == (6 << 20, "MaxPayloadInMB=6")


def test_flags():
    spec = parse("--max-record-mb", "3", "--max-image-pixels", "1000", "--follow-symlinks")
    assert (spec.max_record_mb, spec.max_image_pixels, spec.follow_symlinks) == (3, 1000, True)
    assert (spec.record_limit.max_bytes, spec.record_limit.setting) == (3 << 20, "--max-record-mb=3")


def test_unlimited_payload_still_has_a_record_cap():
    limit = parse("--max-payload-mb", "0").record_limit
    assert (limit.max_bytes, limit.setting) == (100 << 20, "--max-record-mb=100")


def test_limits_change_the_fingerprint_and_bad_values_are_refused():
    assert parse().fingerprint() != parse("--max-image-pixels", "10").fingerprint()
    with pytest.raises(ConfigError, match="max_record_mb"):
        parse("--max-record-mb", "0")
