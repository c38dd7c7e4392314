"""Ray actors get their keys in chunks: one remote call carries many objects.

Counted where the calls land: each actor process counts the chunk calls and the objects it
was handed (``InstanceActor.calls_received``, read back by the driver at the end), and the
driver counts what it submitted. Results stay per object: the report, the error report and
the ledger name every object, the failing one included.
"""

from __future__ import annotations

import json
import math
from collections import Counter

from tests.integration.transform.ledger_files import done_keys, entries
from tfbatch import run_transform
from tfbatch.engines.ray import RayEngine, RayOptions
from tfbatch.transform import TransformSpec
from tfbatch.transform.plan import instance_of

OBJECTS = 48
CONCURRENCY = 4


def test_one_call_per_chunk_and_results_per_object(ray_cluster, linear_model, tmp_path, write_inputs,
                                                   read_outputs):
    inputs = write_inputs(tmp_path / "in", objects=OBJECTS)
    (inputs / "obj0006.jsonl").write_text("[6, 1, 2]\nnot json\n")  # one object with a bad record
    spec = TransformSpec.build(
        model=str(linear_model), input=str(inputs), output=str(tmp_path / "out"),
        content_type="application/jsonlines", split_type="Line", batch_strategy="MultiRecord",
        assemble_with="Line", instance_count=2, max_batch_size=4, max_concurrent_transforms=CONCURRENCY,
    )
    engine = RayEngine(RayOptions(address=ray_cluster.address, cpus_per_instance=0.5))
    report = run_transform(spec, engine=engine)

    # Per object, as before: 47 good objects, one with a failed record named in the report.
    assert report.objects == OBJECTS and report.failed == 1, report.summary()
    assert [e["object"] for e in report.errors] == ["obj0006.jsonl"]
    assert report.error_report is not None
    assert [json.loads(line)["object"] for line in
            (tmp_path / "out" / "_tfbatch" / "errors.jsonl").read_text().splitlines()] == ["obj0006.jsonl"]
    journaled = {e["k"] for e in entries(tmp_path / "out")}
    assert len(journaled) == OBJECTS and "obj0006.jsonl" in journaled
    assert len(set(done_keys(tmp_path / "out"))) == OBJECTS  # a bad record is a finished object
    assert len(read_outputs(tmp_path / "out")) == OBJECTS

    # Calls: what each actor was handed, against what its partition needs in chunks of CONCURRENCY.
    line = engine.timeline
    assert sorted(line.actor_calls) == [0, 1]
    handed = {i: c["objects"] for i, c in line.actor_calls.items()}
    planned = Counter(instance_of(str(p.relative_to(inputs)), 2) for p in inputs.rglob("*.jsonl"))
    assert handed == dict(planned) and sum(handed.values()) == OBJECTS  # every object sent once, in some chunk
    for i, counts in line.actor_calls.items():
        assert counts["calls"] == math.ceil(counts["objects"] / CONCURRENCY), counts
    assert line.calls == sum(c["calls"] for c in line.actor_calls.values())
    assert line.resubmitted == 0
    # Many keys per call: at most one call per CONCURRENCY objects, plus each instance's partial last chunk.
    assert line.calls <= OBJECTS // CONCURRENCY + 2 < OBJECTS / 2

    got = json.loads(read_outputs(tmp_path / "out")["obj0000.jsonl.out"].splitlines()[0])
    assert got  # a real prediction row, not an empty file
