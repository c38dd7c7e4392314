"""Decompression bombs meet the pixel budget before TensorFlow allocates: peak RSS stays flat.

A child process warms the decoder up (TensorFlow loaded, the function traced, one real
image decoded), then decodes a batch holding a PNG bomb beside a good image and reports
its peak RSS before and after. The control case admits a smaller bomb under a larger
budget and shows the measure sees a decode's allocation.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_CHILD = r"""
import io, json, resource, sys
import numpy as np
from PIL import Image
from tfbatch.records.imagedecode import ImageDecoder, ImageTarget
from tfbatch.testing.hostile import png_bomb

side, budget = int(sys.argv[1]), int(sys.argv[2])
buf = io.BytesIO()
Image.fromarray(np.full((96, 128, 3), 90, np.uint8)).save(buf, format="JPEG")
good = buf.getvalue()
bomb = png_bomb(side, side)
decoder = ImageDecoder(ImageTarget(64, 64, 3, "float32"), max_pixels=budget, workers=2)
decoder.decode([good, good])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = decoder.decode([good, bomb], ["good.jpg", "bomb.png"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rows": result.rows, "errors": {k: str(v) for k, v in result.errors.items()},
                  "before_kib": before, "after_kib": after, "bomb_bytes": len(bomb)}))
"""


def _child(side: int, budget: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(side), str(budget)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_png_bomb_is_refused_from_its_header_with_flat_memory():
    out = _child(13000, 50_000_000)  # 169 MP: 507 MB as RGB, 169 MB as the 8-bit grey it is
    assert out["bomb_bytes"] < 1 << 20
    assert out["rows"] == [0]
    assert "bomb.png: PNG image of 13000 x 13000 = 169000000 pixels exceeds the pixel budget" in out["errors"]["1"]
    growth_mib = (out["after_kib"] - out["before_kib"]) / 1024
    assert growth_mib < 40, f"peak RSS grew {growth_mib:.0f} MiB while refusing a bomb"


@pytest.mark.parametrize("budget, admitted", [(10_000_000, False), (50_000_000, True)])
def test_the_measure_sees_a_decode_that_is_admitted(budget, admitted):
    # 6000 x 6000 = 36 MP: 103 MiB decoded to RGB. Admitted, it costs about twice that
    # (the decode and its transpose), not the 4x of a float copy the resize could make.
    out = _child(6000, budget)
    growth_mib = (out["after_kib"] - out["before_kib"]) / 1024
    if admitted:
        assert out["rows"] == [0, 1] and 90 < growth_mib < 440, growth_mib  # a float copy: 515+
    else:
        assert out["rows"] == [0] and growth_mib < 40, growth_mib
