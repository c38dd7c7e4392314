"""CPU of importing TensorFlow and loading a SavedModel, with the cyclic collector on or off
during the load (the instance's ``open`` keeps it off until it freezes the heap).

    python -m benchmarks.transform.profile.load_gc on|off MODEL_DIR

Prints the import's and the load's process CPU, the objects the collector tracks after, and
(``off``) how many of them ``gc.collect()`` would then free, which is what freezing without a
collection keeps.
"""

from __future__ import annotations

import gc
import resource
import sys
import time


def main(mode: str, model_dir: str) -> None:
    from tfbatch.runtime.tf_import import import_tensorflow

    t0 = time.process_time()
    tf = import_tensorflow()
    t1 = time.process_time()
    if mode == "off":
        gc.disable()
    model = tf.saved_model.load(model_dir)
    model.signatures["serving_default"]
    t2 = time.process_time()
    tracked = len(gc.get_objects())
    garbage = ""
    if mode == "off":
        garbage = f", garbage a collection would free {gc.collect()}"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"collector {mode}: import {t1 - t0:.2f} s, load {t2 - t1:.2f} s of CPU, {tracked} tracked objects"
          f"{garbage}, peak RSS {rss} MB")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
