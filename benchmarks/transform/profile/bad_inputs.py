"""Inputs with bad records, made from the shapes bench's clean ones, for A/Bs of the failure paths.

    python -m benchmarks.transform.shapes --shapes jpeg-script,jpeg-float,csv --scale 1 --repeat 1 \\
        --contenders a --workdir W          # the clean inputs and models, once
    python -m benchmarks.transform.profile.bad_inputs --workdir W --out D

Writes under ``D``:

- ``csv-1pct-bad/``: the ``csv`` shape's 20 files of 5,000 lines, every 100th line with a text
  cell put in front (33 cells, one of them not a number): 1,000 bad lines of 100,000;
- ``jpegs-1pct-truncated/``: the 5,000 JPEGs, every 100th cut to its first 2,000 bytes (its
  header passes, its decode fails);
- ``jpegs-10pct-bad/``: the 5,000 JPEGs, every 20th cut to 300 bytes and every 20th (another
  one) replaced by 13 bytes of text: 500 bad images;
- ``tfrecord-1pct-truncated/``, ``recordio-1pct-truncated/``: the two JPEG sets above as the
  ``tfrecord`` and ``recordio`` shapes' 10 shards; ``tfrecord-10pct-bad/`` and
  ``recordio-10pct-bad/`` the same, and in the TFRecord shards each text "image" is a record of
  its own, not in a ``tf.train.Example`` (the script's parse refuses it);
- ``two-inputs/`` and ``two-inputs-bad/``: four JSON Lines files of 5,000 lines
  ``{"a": [16 floats], "b": [16 floats]}`` for ``models/two-inputs/model.tar.gz`` (a Keras model
  with inputs ``a`` and ``b``), and the same lines with ``"a"`` spelled ``"x"``: every record bad.

Clean images are symbolic links to the originals. The jobs and the A/B's commands are in
``bad-records.md``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

from benchmarks.transform.shape_data import write_shards

NOT_AN_IMAGE = b"not an image\n"


def csv_bad(clean: Path, out: Path) -> None:
    out.mkdir(parents=True)
    for path in sorted(clean.iterdir()):
        lines = path.read_bytes().splitlines(keepends=True)
        (out / path.name).write_bytes(b"".join(b"oops," + line if n % 100 == 99 else line
                                               for n, line in enumerate(lines)))


def jpegs_bad(clean: Path, out: Path, *, truncate_every: int, truncate_to: int, text_every: int = 0) -> None:
    out.mkdir(parents=True)
    for n, path in enumerate(sorted(clean.iterdir()), start=1):
        target = out / path.name
        if n % truncate_every == 3:
            target.write_bytes(path.read_bytes()[:truncate_to])
        elif text_every and n % text_every == 13:
            target.write_bytes(NOT_AN_IMAGE)
        else:
            target.symlink_to(path.resolve())


def two_inputs(out: Path, models: Path) -> None:
    """The model and its clean and all-bad JSON Lines."""
    import keras
    import tensorflow as tf

    from tfbatch.artifact import package

    keras.utils.set_random_seed(7)
    a, b = keras.Input((16,), name="a"), keras.Input((16,), name="b")
    x = keras.layers.Dense(64, activation="relu")(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], keras.layers.Dense(10, activation="softmax")(x))

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="a"),
                                  tf.TensorSpec([None, 16], tf.float32, name="b")])
    def serve(a, b):
        return {"probabilities": model([a, b])}

    folder = models / "two-inputs"
    if folder.exists():
        shutil.rmtree(folder)
    saved = folder / "savedmodel" / "1"
    tf.saved_model.save(model, str(saved), signatures={"serving_default": serve})
    package([saved], folder / "model.tar.gz", versions=[1])
    rnd = random.Random(1)
    good, bad = out / "two-inputs", out / "two-inputs-bad"
    good.mkdir(parents=True)
    bad.mkdir(parents=True)
    for f in range(4):
        lines = [json.dumps({"a": [round(rnd.random(), 6) for _ in range(16)],
                             "b": [round(rnd.random(), 6) for _ in range(16)]}) + "\n" for _ in range(5000)]
        (good / f"part-{f:03d}.jsonl").write_text("".join(lines))
        (bad / f"part-{f:03d}.jsonl").write_text("".join(line.replace('"a"', '"x"', 1) for line in lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the shapes bench's --workdir (clean inputs, models)")
    parser.add_argument("--out", required=True, help="where the inputs with bad records go (emptied first)")
    args = parser.parse_args()
    work, out = Path(args.workdir), Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    jpegs = work / "jpegs-5000-0" / "input"
    csv_bad(work / "csv-5000-0" / "input", out / "csv-1pct-bad")
    jpegs_bad(jpegs, out / "jpegs-1pct-truncated", truncate_every=100, truncate_to=2000)
    jpegs_bad(jpegs, out / "jpegs-10pct-bad", truncate_every=20, truncate_to=300, text_every=20)
    for name in ("1pct-truncated", "10pct-bad"):
        for kind in ("tfrecord", "recordio"):
            (out / f"{kind}-{name}").mkdir()
            write_shards(sorted((out / f"jpegs-{name}").iterdir()), out / f"{kind}-{name}", kind, bare=NOT_AN_IMAGE)
    two_inputs(out, out / "models")
    print(f"inputs with bad records under {out}")


if __name__ == "__main__":
    main()
