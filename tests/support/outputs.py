"""Compare the ``.out`` files of two runs of an image-classifier job whose model batches differ."""

from __future__ import annotations

import json

import numpy as np


def agree(a: dict[str, bytes], b: dict[str, bytes]) -> None:
    """Same objects, same classes; probabilities equal to float32 rounding. A model batch of
    another size may sum in another order (oneDNN picks its kernels by batch size on some CPUs),
    as the dynamic batcher's batches always could, so bytes need not match."""
    assert a.keys() == b.keys()
    for name in a:
        pa, pb = json.loads(a[name])["predictions"], json.loads(b[name])["predictions"]
        assert [p["classes"] for p in pa] == [p["classes"] for p in pb], name
        np.testing.assert_allclose([p["probabilities"] for p in pa], [p["probabilities"] for p in pb],
                                   rtol=1e-5, err_msg=name)
