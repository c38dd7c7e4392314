"""TF Serving's batching parameters file, version policies and how they reach RuntimeSettings."""

from __future__ import annotations

import pytest

from tfbatch.errors import ConfigError
from tfbatch.runtime import RuntimeSettings
from tfbatch.runtime.batching_params import parse_batching_parameters, read_batching_parameters
from tfbatch.runtime.versions import VersionPolicy, scan_versions

FULL = """
# written for TF Serving
max_batch_size { value: 32 }
batch_timeout_micros { value: 5000 }
num_batch_threads { value: 4 }
max_enqueued_batches: { value: 100 }
allowed_batch_sizes: 8
allowed_batch_sizes: 16
allowed_batch_sizes: 32
pad_variable_length_inputs: false
"""


def test_full_file_parses_into_settings_fields():
    assert parse_batching_parameters(FULL) == {
        "max_batch_size": 32,
        "batch_timeout_micros": 5000,
        "num_batch_threads": 4,
        "max_enqueued_batches": 100,
        "allowed_batch_sizes": (8, 16, 32),
        "enable_batching": True,
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("max_batch_size { value: 8 }\nmax_batch_sise { value: 8 }", "f:2: unknown field 'max_batch_sise'"),
        ("max_batch_size: 8", "f:1: expected '{' after max_batch_size"),
        ("max_batch_size { value: 8.5 }", "f:1: unexpected text '.5'"),
        ("max_batch_size { value: -1 }", "f:1: max_batch_size must be >= 0, got -1"),
        ("max_batch_size { value: 8 }\nmax_batch_size { value: 9 }", "f:2: max_batch_size is given twice"),
        ("max_batch_size { value: 8 ", "expected }, got end of file"),
        ("pad_variable_length_inputs: true", "pad_variable_length_inputs: true is not supported"),
        ("pad_variable_length_inputs: maybe", "must be true or false, got 'maybe'"),
        ('thread_pool_name { value: "p" }', "thread_pool_name is not supported"),
        ("num_batch_threads { count: 2 }", "f:1: expected 'value' inside num_batch_threads, got 'count'"),
    ],
)
def test_bad_files_name_the_file_line_and_problem(text, message):
    with pytest.raises(ConfigError) as info:
        parse_batching_parameters(text, "f")
    assert message in str(info.value)
    assert str(info.value).startswith("f:")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read batching parameters file .*nope.txt"):
        read_batching_parameters(tmp_path / "nope.txt")


def test_file_wins_over_variables_and_overrides(tmp_path):
    path = tmp_path / "batching.txt"
    path.write_text("max_batch_size { value: 16 }\nallowed_batch_sizes: 4\nallowed_batch_sizes: 16\n")
    env = {"SAGEMAKER_TFS_MAX_BATCH_SIZE": "64", "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS": "700",
           "TFBATCH_BATCHING_PARAMETERS_FILE": str(path)}
    s = RuntimeSettings.from_env(env, max_batch_size=2)
    assert (s.enable_batching, s.max_batch_size, s.allowed_batch_sizes) == (True, 16, (4, 16))
    # what the file does not set still comes from the variables
    assert s.batch_timeout_micros == 700
    # the argument names a file instead of the variable
    other = tmp_path / "other.txt"
    other.write_text("max_batch_size { value: 3 }")
    assert RuntimeSettings.from_env(env, batching_parameters_file=str(other)).max_batch_size == 3


def test_allowed_sizes_must_end_at_max_batch_size(tmp_path):
    path = tmp_path / "b.txt"
    path.write_text("max_batch_size { value: 16 }\nallowed_batch_sizes: 4\nallowed_batch_sizes: 8\n")
    with pytest.raises(ConfigError, match=r"allowed_batch_sizes \(8\) must equal max_batch_size \(16\).*b.txt"):
        RuntimeSettings.from_env({}, batching_parameters_file=str(path))
    with pytest.raises(ValueError, match="increasing"):
        RuntimeSettings(max_batch_size=8, allowed_batch_sizes=(8, 4, 8))


@pytest.mark.parametrize(
    "text, available, selected",
    [
        ("latest", [1, 2, 10], {10}),
        ("latest:2", [1, 2, 10], {2, 10}),
        ("latest:5", [3], {3}),
        ("specific:1,3", [1, 2, 3], {1, 3}),
        ("specific:7", [1, 2], set()),
        ("all", [1, 2, 3], {1, 2, 3}),
        ("LATEST : 1", [4, 5], {5}),
    ],
)
def test_version_policies_select(text, available, selected):
    assert VersionPolicy.parse(text).select(available) == selected


@pytest.mark.parametrize("text", ["latest:0", "latest:x", "specific:", "specific:a,b", "all:2", "newest", ""])
def test_bad_version_policy_says_which_forms_exist(text):
    with pytest.raises(ValueError, match="'latest', 'latest:N', 'specific:V1,V2,...' or 'all'"):
        VersionPolicy.parse(text)
    with pytest.raises(ConfigError, match="TFBATCH_MODEL_VERSION_POLICY"):
        RuntimeSettings.from_env({"TFBATCH_MODEL_VERSION_POLICY": text or " x"})


def test_scan_versions_skips_incomplete_and_non_numeric_folders(tmp_path):
    for name, complete in (("1", True), ("2", False), ("x3", True), ("10", True)):
        (tmp_path / name).mkdir()
        if complete:
            (tmp_path / name / "saved_model.pb").write_bytes(b"")
    (tmp_path / "5").write_text("a file, not a folder")
    assert scan_versions(tmp_path) == {1: tmp_path / "1", 10: tmp_path / "10"}
    assert scan_versions(tmp_path / "missing") == {}


def test_transform_flag_checks_the_file_and_hands_it_to_instances(tmp_path, monkeypatch):
    from tfbatch.cli import build_parser
    from tfbatch.transform.cli import spec_from_args

    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.txt").write_text("max_batch_size { value: 32 }\n")
    base = ["transform", "--model", "m", "--input", "in", "--output", "out", "--batching-parameters-file"]
    spec = spec_from_args(build_parser().parse_args([*base, "b.txt"]))
    path = spec.container_env()["TFBATCH_BATCHING_PARAMETERS_FILE"]
    assert path == str(tmp_path / "b.txt")
    assert RuntimeSettings.from_env(spec.container_env()).max_batch_size == 32
    (tmp_path / "bad.txt").write_text("max_batch_size { value: x }\n")
    with pytest.raises(ConfigError, match=r"bad.txt:1: expected an integer for max_batch_size, got 'x'"):
        spec_from_args(build_parser().parse_args([*base, "bad.txt"]))
