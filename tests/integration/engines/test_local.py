"""The local engine: N instances as spawned worker processes, same bytes as one instance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfbatch import plan_transform, run_transform
from tfbatch.engines import get_engine
from tfbatch.transform import TransformSpec
from tfbatch.transform.plan import instance_of


def _outs(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.out"))}


def test_two_instances_partition_by_key_and_match_one_instance(tmp_path, linear_model):
    inp = tmp_path / "in"
    (inp / "d").mkdir(parents=True)
    for i in range(12):
        (inp / ("d" if i % 2 else "") / f"{i}.jsonl").write_text(f"[{i}, 1, 2]\n[{i}, 3, 4]\n")
    common = dict(model=str(linear_model), input=str(inp), split_type="Line", content_type="application/json",
                  assemble_with="Line")
    one = run_transform(output=str(tmp_path / "one"), **common)
    two = run_transform(output=str(tmp_path / "two"), instance_count=2, **common)
    assert two.ok and two.objects == 12 and two.instances == 2, two.summary()
    assert _outs(tmp_path / "one") == _outs(tmp_path / "two") and len(_outs(tmp_path / "one")) == 12
    # Each instance ran its own model server: batch stats come from both processes.
    assert {name.split(":")[0] for name in two.batches} == {"0", "1"}
    spec = TransformSpec.build(output=str(tmp_path / "two"), instance_count=2, **common)
    plan = plan_transform(spec)
    assert plan.objects == [sum(1 for k in _keys(inp) if instance_of(k, 2) == i) for i in range(2)]
    assert plan.done == plan.objects  # the ledger knows every object finished


def test_an_instance_as_two_processes_writes_what_one_process_writes_and_resumes_with_one(tmp_path, linear_model):
    # --processes 2 (the default on 8-11 cores): one instance, two worker processes, each on
    # its partition with its own model, journal and summary.
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(10):
        (inp / f"{i}.jsonl").write_text(f"[{i}, 1, 2]\n[{i}, 3, 4]\n")
    common = dict(model=str(linear_model), input=str(inp), split_type="Line", content_type="application/json",
                  assemble_with="Line")
    one = run_transform(output=str(tmp_path / "one"), processes=1, **common)
    two = run_transform(output=str(tmp_path / "two"), processes=2, **common)
    assert one.ok and one.processes == 1 and {name.split(":")[0] for name in one.batches} == {"0"}
    assert two.ok and two.objects == 10 and (two.instances, two.processes) == (1, 2), two.summary()
    assert {name.split(":")[0] for name in two.batches} == {"0", "1"}
    # Ten objects, a listing the engine saw whole: dealt by size, 5 and 5, where their keys'
    # hash would have given 2 and 8.
    assert sorted(sum(1 for k in _keys(inp) if instance_of(k, 2) == p) for p in range(2)) == [2, 8]
    assert sorted(stats["objects"] for stats in two.batches.values()) == [5, 5], two.batches
    assert _outs(tmp_path / "one") == _outs(tmp_path / "two") and len(_outs(tmp_path / "two")) == 10
    # The ledger is the job's, whatever ran it: the same job with one process finds it all done.
    again = run_transform(output=str(tmp_path / "two"), processes=1, **common)
    assert again.ok and again.objects == 0 and again.skipped == 10, again.summary()


HANDLER = """
import requests


def handler(data, context):
    response = requests.post(context.rest_uri, data=data.read())
    return response.content, context.accept_header
"""


def test_a_single_handler_gets_a_second_process_only_where_the_job_pays_for_it(tmp_path, linear_model, with_script,
                                                                             monkeypatch):
    # The rule gives a single handler 2 processes from 2 cores, each extra one only for
    # MIN_OBJECTS_PER_PROCESS objects, counted from the start of the listing before they start.
    from tfbatch.engines import local
    from tfbatch.runtime.placement import usable_cores

    if usable_cores() < 2:
        pytest.skip("the rule gives a single handler one process below 2 cores")
    model = with_script(tmp_path, linear_model, HANDLER)
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(6):
        (inp / f"{i}.json").write_text(json.dumps({"instances": [[i, 1, 2]]}))
    common = dict(model=str(model), input=str(inp), content_type="application/json")
    small = run_transform(output=str(tmp_path / "small"), **common)
    assert small.ok and small.objects == 6 and small.processes == 1, small.summary()
    monkeypatch.setattr(local, "MIN_OBJECTS_PER_PROCESS", 3)  # six objects now pay for two
    big = run_transform(output=str(tmp_path / "big"), **common)
    assert big.ok and big.objects == 6 and big.processes == 2, big.summary()
    assert _outs(tmp_path / "small") == _outs(tmp_path / "big") and len(_outs(tmp_path / "big")) == 6


def _keys(root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in root.rglob("*.jsonl")]


def test_instance_assignment_is_stable():
    # Fixed values: the assignment must not depend on the process (hash seed) or the listing.
    assert [instance_of(k, 4) for k in ("a.jpg", "b.jpg", "dir/c.jpg", "d")] == [
        instance_of(k, 4) for k in ("a.jpg", "b.jpg", "dir/c.jpg", "d")
    ]
    import subprocess
    import sys

    code = "from tfbatch.transform.plan import instance_of; print([instance_of(f'k{i}', 3) for i in range(20)])"
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert runs == {str([instance_of(f"k{i}", 3) for i in range(20)]) + "\n"}
    assert set(json.loads(runs.pop())) == {0, 1, 2}
    assert instance_of("anything", 1) == 0


def test_a_broken_model_is_a_fatal_instance_error_not_a_hang(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.json").write_text("[1]")
    (tmp_path / "model" / "1").mkdir(parents=True)
    (tmp_path / "model" / "1" / "saved_model.pb").write_bytes(b"not a model")
    spec = TransformSpec.build(model=str(tmp_path / "model"), input=str(inp), output=str(tmp_path / "o"))
    (summary,) = get_engine("local").run(spec, lambda r: None)
    assert summary.fatal
    report = run_transform(spec)
    assert not report.ok and report.fatal


EXIT_WATCH = """
import atexit
import os
from pathlib import Path

MARKS = Path(os.environ["EXIT_MARKS"])


class Teardown:
    def __del__(self):  # runs when the interpreter tears the module down, as a plain exit does
        (MARKS / f"teardown-{os.getpid()}").write_text("torn down")


KEEP = Teardown()
atexit.register(lambda: (MARKS / f"atexit-{os.getpid()}").write_text("ran"))


def input_handler(data, context):
    return data.read()


def output_handler(response, context):
    return response.content, context.accept_header
"""


@pytest.mark.parametrize("full", ["1", ""])
def test_an_instance_process_ends_without_tensorflows_teardown_after_its_summary(tmp_path, linear_model, with_script,
                                                                                  monkeypatch, full):
    # The parent joins its worker processes: each ends as the tfbatch command does
    # (runtime/exit.end), its atexit handlers run, without the interpreter's teardown of
    # TensorFlow's modules, which took 0.5-0.8 s of the job's end. TFBATCH_FULL_EXIT=1 keeps it.
    model = with_script(tmp_path, linear_model, EXIT_WATCH)
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("EXIT_MARKS", str(marks))
    monkeypatch.setenv("TFBATCH_FULL_EXIT", full)
    inp = tmp_path / "in"
    inp.mkdir()
    for i in range(4):
        (inp / f"{i}.json").write_text(json.dumps({"instances": [[i, 1, 2]]}))
    report = run_transform(model=str(model), input=str(inp), output=str(tmp_path / "out"), processes=2,
                           handler_workers=0, content_type="application/json")
    assert report.ok and report.objects == 4 and report.processes == 2, report.summary()
    assert len(_outs(tmp_path / "out")) == 4
    atexits = sorted(p.name.split("-")[1] for p in marks.glob("atexit-*"))
    teardowns = sorted(p.name.split("-")[1] for p in marks.glob("teardown-*"))
    assert len(atexits) == 2  # both processes imported the script and ran their exit handlers
    assert teardowns == (atexits if full else [])
