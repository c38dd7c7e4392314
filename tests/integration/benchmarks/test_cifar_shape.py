"""The ``png-cifar-script`` shape's contenders feed the model the same pixels: seed 002's script
run by tfbatch (PIL, JSON integers 0-255) and the expert's tf.data script with ``--raw``
(``decode_image`` and a cast), on a few of the shape's PNGs and its CIFAR-10 CNN."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.transform import shape_data, shape_tfdata
from benchmarks.transform.shape_outputs import agreement, read_outputs

pytestmark = pytest.mark.timeout(300)


def test_the_expert_reads_the_pixels_the_seed_script_sends(tmp_path):
    import tfbatch

    inputs = shape_data.pngs(tmp_path / "work", 6)
    names = sorted(p.name for p in inputs.iterdir())
    assert len(names) == 6 and all(n.endswith(".png") for n in names)
    model = shape_data.keras_artifact("cifar", tmp_path / "work", shape_data.CIFAR_SCRIPT)

    expert = shape_tfdata.run("files", str(model / "savedmodel" / "1"), str(inputs), str(tmp_path / "b"),
                              batch_size=4, float_model=True, raw=True)
    assert expert["records"] == 6
    report = tfbatch.run_transform(model=str(model / "model.tar.gz"), input=str(inputs),
                                   output=str(tmp_path / "a"), content_type="application/x-image")
    assert report.failed == 0

    ours, theirs = read_outputs(tmp_path / "a"), read_outputs(tmp_path / "b")
    assert sorted(ours) == [n + ".out" for n in names]
    verdict = agreement(theirs, ours)
    assert verdict["same"], verdict
    assert all(np.asarray(rows).shape == (1, 10) for rows in ours.values())
    # Not an agreement any pixels would give: scaled to [0, 1] (tfbatch's own decode, with no
    # script) the same images answer otherwise.
    tfbatch.run_transform(model=str(model / "model-noscript.tar.gz"), input=str(inputs),
                          output=str(tmp_path / "scaled"), content_type="application/x-image")
    assert not agreement(theirs, read_outputs(tmp_path / "scaled"))["same"]
