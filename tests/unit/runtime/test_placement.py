"""GPU partitioning across instances: pure functions, no TensorFlow, no CUDA."""

from __future__ import annotations

import pytest

from tfbatch.errors import ConfigError
from tfbatch.runtime.placement import (
    count_nvidia_gpus,
    instance_env,
    partition_gpus,
    replica_devices,
    visible_gpus,
)


def test_visible_gpus_from_env_or_detected():
    assert visible_gpus({}, 3) == ["0", "1", "2"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, 8) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": " 1 , 0 "}, 8) == ["1", "0"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, 8) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, 8) == []
    # CUDA ignores everything from the first -1 on.
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "4,-1,5"}, 8) == ["4"]
    assert visible_gpus({}, 0) == []


def test_even_split_when_not_asked():
    assert partition_gpus(["0", "1", "2", "3"], 2, None) == [["0", "1"], ["2", "3"]]
    assert partition_gpus(["0", "1", "2", "3"], 4, None) == [["0"], ["1"], ["2"], ["3"]]
    # Leftover GPUs are not handed out twice.
    assert partition_gpus(["0", "1", "2"], 2, None) == [["0"], ["1"]]


def test_more_instances_than_gpus_share_round_robin():
    assert partition_gpus(["0", "1"], 3, None) == [["0"], ["1"], ["0"]]
    assert partition_gpus(["0", "1"], 3, 0.5) == [["0"], ["1"], ["0"]]


def test_explicit_count_gives_disjoint_lists():
    parts = partition_gpus([str(i) for i in range(8)], 4, 2)
    assert parts == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]
    flat = [g for p in parts for g in p]
    assert len(flat) == len(set(flat))


def test_too_many_asked_is_refused_with_the_numbers():
    with pytest.raises(ConfigError, match=r"3 instance\(s\) x 2 GPU\(s\) each needs 6 GPUs; 4 visible"):
        partition_gpus(["0", "1", "2", "3"], 3, 2)
    with pytest.raises(ConfigError, match="whole number"):
        partition_gpus(["0", "1", "2", "3"], 1, 1.5)
    with pytest.raises(ConfigError, match="none is visible"):
        partition_gpus([], 1, 1)


def test_cpu_only():
    assert partition_gpus(["0", "1"], 2, 0) == [[], []]
    assert partition_gpus([], 2, None) == [[], []]
    assert instance_env([]) == {"CUDA_VISIBLE_DEVICES": "-1"}
    assert instance_env(["2", "3"]) == {"CUDA_VISIBLE_DEVICES": "2,3"}


def test_one_replica_per_visible_gpu():
    assert replica_devices(0) == ["/CPU:0"]
    assert replica_devices(2) == ["/GPU:0", "/GPU:1"]


def test_count_nvidia_gpus_reads_device_nodes(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    assert count_nvidia_gpus(str(tmp_path)) == 2
    assert count_nvidia_gpus(str(tmp_path / "missing")) == 0
