"""The top-level API: cheap to import, run_transform picks an engine by name or takes one."""

from __future__ import annotations

import pytest

import tfbatch
from tfbatch.engines import get_engine
from tfbatch.engines.local import LocalEngine
from tfbatch.engines.ray import RayEngine
from tfbatch.errors import ConfigError
from tfbatch.transform import Engine


def test_run_transform_is_served_lazily_from_api():
    from tfbatch import api

    assert tfbatch.run_transform is api.run_transform
    assert tfbatch.plan_transform is api.plan_transform
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tfbatch.nope  # noqa: B018


def test_engines_implement_the_protocol_as_values():
    local = get_engine("local")
    assert isinstance(local, LocalEngine) and isinstance(local, Engine) and local.name == "local"
    ray = get_engine("ray", address="ray://example:10001", cpus_per_instance=0.5, gpus_per_instance=None)
    assert isinstance(ray, RayEngine) and isinstance(ray, Engine) and ray.name == "ray"
    assert (ray.options.address, ray.options.cpus_per_instance, ray.options.gpus_per_instance) == (
        "ray://example:10001", 0.5, 0,
    )


def test_unknown_engine_and_stray_options_are_config_errors():
    with pytest.raises(ConfigError, match="unknown engine 'spark': expected 'local' or 'ray'"):
        get_engine("spark")
    with pytest.raises(ConfigError, match="engine 'local' takes no options, got address"):
        get_engine("local", address="x")


def test_ray_options_come_from_the_environment_unless_given(monkeypatch):
    monkeypatch.setenv("TFBATCH_RAY_ADDRESS", "ray://env:1")
    monkeypatch.setenv("TFBATCH_RAY_REMOTE_READ", "true")
    monkeypatch.setenv("TFBATCH_RAY_LOGS", "1")
    engine = get_engine("ray")
    assert engine.options.address == "ray://env:1" and engine.options.remote_read is True
    assert engine.options.log_to_driver is True
    assert get_engine("ray", address="ray://flag:2").options.address == "ray://flag:2"


class RecordingEngine:
    """An Engine of this test's own: the job runner must accept any value with the protocol."""

    name = "recording"

    def __init__(self):
        self.specs = []

    def run(self, spec, emit, stop=None):
        from tfbatch.transform.report import InstanceSummary, ObjectResult

        self.specs.append(spec)
        emit(ObjectResult(key="a.json", ok=True, records=2, written=True))
        return [InstanceSummary(instance=0, objects=1, succeeded=1, records=2)]


def test_run_transform_runs_the_engine_it_is_given(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text("{}")
    engine = RecordingEngine()
    assert isinstance(engine, Engine)
    report = tfbatch.run_transform(model=str(tmp_path / "model"), input=str(tmp_path / "in"),
                                   output=str(tmp_path / "out"), engine=engine)
    (spec,) = engine.specs
    assert spec.engine == "recording"  # the report and plan say where the job ran
    assert (report.objects, report.succeeded, report.records) == (1, 1, 2)
    assert (tmp_path / "out" / "_tfbatch" / "report.json").is_file()
