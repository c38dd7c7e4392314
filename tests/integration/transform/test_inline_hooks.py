"""A script that imports TensorFlow: by default its hooks run in the instance's own process,
a hop at a time (handlers/inline_pool.py), instead of in worker processes that would each
import TensorFlow again. The answers must be the worker pool's, byte for byte."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from benchmarks.common.models import INFERENCE_SCRIPT
from tests.support.outputs import agree
from tfbatch import run_transform
from tfbatch.testing.models import make_image_bytes_model, scripted_archive

SCRIPT = "import tensorflow as tf\n" + INFERENCE_SCRIPT + '''

_plain_input = input_handler


def input_handler(data, context):
    body = data.read()
    if body.endswith(b"RAISE"):
        raise ValueError("this record asked to fail")
    assert tf.constant(1).numpy() == 1  # the script really uses TensorFlow
    return _plain_input(io.BytesIO(body), context)


import io
'''


def _png(value: int, tail: bytes = b"") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), value % 256, np.uint8)).save(buf, format="PNG")
    return buf.getvalue() + tail


def _scripted_job(tmp_path, images: int, *, step: int, raising: tuple[int, ...] = ()) -> None:
    """``model.tar.gz`` (the image-bytes model with SCRIPT) and ``in/``: ``images`` PNGs, those
    numbered in ``raising`` ending in the bytes that make the script fail."""
    scripted_archive([make_image_bytes_model(tmp_path / "sm" / "1")], SCRIPT, tmp_path)
    (tmp_path / "in").mkdir()
    for n in range(images):
        (tmp_path / "in" / f"img-{n:03d}.png").write_bytes(_png(n * step, b"RAISE" if n in raising else b""))


def _job(tmp_path, out: str, workers: int | None, **kw):
    return run_transform(model=str(tmp_path / "model.tar.gz"), input=str(tmp_path / "in"),
                         output=str(tmp_path / out), content_type="application/x-image", handler_workers=workers, **kw)


def _outputs(root) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.out"))}


def test_tensorflow_script_runs_its_hooks_in_process_with_the_pools_answers(tmp_path):
    _scripted_job(tmp_path, 30, step=7, raising=(4, 17))

    pool = _job(tmp_path, "pool", 2, max_batch_size=1)
    inline = _job(tmp_path, "inline", None, max_batch_size=1)

    assert _outputs(tmp_path / "inline") == _outputs(tmp_path / "pool")
    assert len(_outputs(tmp_path / "inline")) == 28
    assert (inline.succeeded, inline.bad_input, inline.failed_to_process) == (pool.succeeded, pool.bad_input, 0)
    key = lambda e: e["object"]  # noqa: E731
    assert sorted(inline.errors, key=key) == sorted(pool.errors, key=key)
    assert [e["error"] for e in inline.errors] == ["this record asked to fail"] * 2
    (stats,) = inline.batches.values()
    assert stats["handler_workers"] == 0 and stats["hooks"].startswith("in-process") and stats["hops"] > 0
    (pool_stats,) = pool.batches.values()
    assert pool_stats["handler_workers"] == 2


def test_tensorflow_script_batches_hops_in_process(tmp_path):
    _scripted_job(tmp_path, 24, step=5)
    inline = _job(tmp_path, "inline", None, max_batch_size=8)
    assert inline.succeeded == 24
    (stats,) = inline.batches.values()
    # Several records per hop: the hop's rows went to the model together.
    assert stats["rows"] == 24 and stats["batches"] < 24


def test_a_scripted_job_without_a_batch_size_has_its_hops_sized_by_the_probe(tmp_path):
    _scripted_job(tmp_path, 40, step=3, raising=(9,))

    tuned = _job(tmp_path, "tuned", None)
    fixed = _job(tmp_path, "fixed", None, max_batch_size=4)

    agree(_outputs(tmp_path / "tuned"), _outputs(tmp_path / "fixed"))  # batches of other sizes
    assert (tuned.succeeded, tuned.bad_input) == (fixed.succeeded, fixed.bad_input) == (39, 1)
    (stats,) = tuned.batches.values()
    assert stats["predict"] == "handler-pool" and stats["chosen_by"] == {"max_batch_size": "tuner"}
    assert stats["autotune"]["source"] == "tuner" and stats["max_batch_size"] == stats["autotune"]["chosen"]
    assert stats["rows"] == 40 and stats["handler_workers"] == 0
    (fixed_stats,) = fixed.batches.values()
    assert "autotune" not in fixed_stats and fixed_stats["max_batch_size"] == 4 and fixed_stats["batches"] >= 10
