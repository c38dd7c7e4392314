"""Each choice the batch lane can make for itself has a flag that overrides it, and the job
summary says what the lane ran with and whether it was chosen or given."""

from __future__ import annotations

import argparse

import pytest

from tfbatch.transform.cli import add_transform_arguments, spec_from_args
from tfbatch.transform.report import JobReport, lane_choices
from tfbatch.transform.spec import TransformSpec


def parse(*argv: str) -> TransformSpec:
    p = argparse.ArgumentParser()
    add_transform_arguments(p)
    return spec_from_args(p.parse_args(["--model", "m", "--input", "s3://b/in/", "--output", "s3://b/out/", *argv]))


def test_without_flags_the_lane_tunes_itself():
    spec = parse()
    assert spec.autotune is True and spec.lane_workers is None and spec.max_concurrent_transforms is None


def test_flags_override_batch_size_workers_and_objects_in_flight():
    spec = parse("--max-batch-size", "32", "--lane-workers", "3", "--max-concurrent-transforms", "40")
    assert spec.autotune is False
    assert (spec.max_batch_size, spec.lane_workers, spec.max_concurrent_transforms) == (32, 3, 40)


def test_lane_workers_must_be_positive():
    with pytest.raises(Exception, match="lane_workers"):
        parse("--lane-workers", "0")


def test_parallelism_flags_do_not_change_the_job_fingerprint():
    # A job resumed with other tuning writes the same bytes, so it must keep its ledger.
    assert parse().fingerprint() == parse("--lane-workers", "4", "--max-batch-size", "8").fingerprint()


def test_the_summary_names_the_lanes_choices():
    stats = {"lane": "batch", "max_batch_size": 16, "workers": 2, "in_flight_objects": 48,
             "autotune": {"chosen": 16, "settled": True, "ms_per_row": {"16": 1.0}, "choices": [16]}}
    report = JobReport(objects=1, succeeded=1, batches={"0:model/1/serving_default": stats})
    text = report.summary()
    assert "batch size 16, lane workers 2, up to 48 objects in flight (auto-tuned" in text
    given = lane_choices("m", {**stats, "autotune": None})
    assert "set by flags" in given and "--lane-workers" in given
    # The per-object path has no lane line.
    assert "lane workers" not in JobReport(batches={"0:m": {"lane": "per-object"}}).summary()


def test_the_summary_says_who_set_each_knob_and_why_the_tuner_chose():
    stats = {"lane": "batch", "max_batch_size": 32, "workers": 3, "in_flight_objects": 160,
             "autotune": {"chosen": 32, "source": "tuner", "why": "32 after timing 16: 2, 32: 1.5 ms per row (wall)"},
             "chosen_by": {"max_batch_size": "tuner", "workers": "default (one per core, at least 3)",
                           "in_flight_objects": "batch size x (workers + 2)"}}
    line = lane_choices("m", stats)
    assert "batch size by tuner, workers by default (one per core, at least 3)" in line
    assert line.endswith("tuner: 32 after timing 16: 2, 32: 1.5 ms per row (wall)")
    flagged = lane_choices("m", {**stats, "autotune": None,
                                 "chosen_by": {"max_batch_size": "flag", "workers": "flag", "in_flight_objects": "flag"}})
    assert "batch size by flag, workers by flag, objects in flight by flag" in flagged and "tuner:" not in flagged
