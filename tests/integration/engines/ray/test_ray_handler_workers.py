"""A scripted job (the bench's b64/JSON ``inference.py`` pair) with handler workers inside Ray actors.

Each actor hosts an ``InstanceRunner`` that starts its own handler worker processes
(``--handler-workers``, handlers/pool.py) beside the Ray worker; the job must give the
local engine's bytes and error texts, and the report must show the hooks ran in the pool.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks.common.models import INFERENCE_SCRIPT
from tfbatch import run_transform
from tfbatch.artifact import package
from tfbatch.engines.ray import RayEngine, RayOptions
from tfbatch.testing.models import make_image_bytes_model

OBJECTS = 20
BROKEN = 6  # this object is not an image: the model's decode fails for it on both engines


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ray-pool")
    savedmodel = make_image_bytes_model(root / "sm" / "1")
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text(INFERENCE_SCRIPT)
    return package([savedmodel], root / "model.tar.gz", code_dir=root / "code")


def _inputs(root: Path) -> Path:
    root.mkdir()
    for n in range(OBJECTS):
        buf = io.BytesIO()
        Image.fromarray(np.full((8, 8), n * 11 % 256, np.uint8)).save(buf, format="PNG")
        (root / f"img-{n:03d}.png").write_bytes(b"not an image at all" if n == BROKEN else buf.getvalue())
    return root


def _outputs(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.out"))}


def _job(archive: Path, inputs: Path, out: Path, **extra):
    # Batches of one: the model sees the same shapes on both engines, so the floats are the same bytes.
    return run_transform(model=str(archive), input=str(inputs), output=str(out), content_type="application/x-image",
                         instance_count=2, handler_workers=1, max_batch_size=1, **extra)


def test_handler_workers_inside_ray_actors_give_the_local_bytes(ray_cluster, archive, tmp_path):
    inputs = _inputs(tmp_path / "in")
    local = _job(archive, inputs, tmp_path / "local")
    on_ray = _job(archive, inputs, tmp_path / "ray",
                  engine=RayEngine(RayOptions(address=ray_cluster.address, cpus_per_instance=0.5)))

    assert not on_ray.fatal, on_ray.fatal
    assert (on_ray.objects, on_ray.succeeded) == (local.objects, local.succeeded) == (OBJECTS, OBJECTS - 1)
    assert (on_ray.bad_input, on_ray.failed_to_process) == (local.bad_input, local.failed_to_process)
    ray_out, local_out = _outputs(tmp_path / "ray"), _outputs(tmp_path / "local")
    assert len(local_out) == OBJECTS - 1 and f"img-{BROKEN:03d}.png.out" not in local_out
    assert ray_out == local_out
    assert [(e["object"], e["error"]) for e in on_ray.errors] == [(e["object"], e["error"]) for e in local.errors]
    assert [e["object"] for e in on_ray.errors] == [f"img-{BROKEN:03d}.png"]
    # The hooks ran in each actor's handler worker process, not in the actor itself.
    pools = list(on_ray.batches.values())
    assert len(pools) == 2, on_ray.batches  # one per instance
    assert all(s["handler_workers"] == 1 and s["hops"] > 0 for s in pools), pools
