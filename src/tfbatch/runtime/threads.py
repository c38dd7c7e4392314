"""Apply TF thread-pool sizes once, before TensorFlow runs anything.

TensorFlow fixes its intra/inter-op pools when the eager context is initialized; after
that, setting them raises RuntimeError. Serving must not crash over a tuning knob, so a
late call only warns.
"""

from __future__ import annotations

import logging
import threading

from tfbatch.runtime.settings import RuntimeSettings

log = logging.getLogger(__name__)
_lock = threading.Lock()
_applied: tuple[int | None, int | None] | None = None


def configure_threads(settings: RuntimeSettings, *, quiet: bool = False) -> bool:
    """Set tf.config.threading from ``settings``; True if the wanted sizes are in effect.
    ``quiet``: where TensorFlow's pools are fixed already, say so at debug level only."""
    global _applied
    wanted = (settings.intra_op_parallelism, settings.inter_op_parallelism)
    if wanted == (None, None):
        return True
    with _lock:
        if _applied == wanted:
            return True
        from tfbatch.runtime.tf_import import import_tensorflow

        tf = import_tensorflow()

        try:
            if wanted[0] is not None:
                tf.config.threading.set_intra_op_parallelism_threads(wanted[0])
            if wanted[1] is not None:
                tf.config.threading.set_inter_op_parallelism_threads(wanted[1])
        except RuntimeError as exc:
            current = (
                tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads(),
            )
            (log.debug if quiet else log.warning)(
                "TF thread pools already initialized (intra=%s, inter=%s); cannot apply "
                "intra_op_parallelism=%s inter_op_parallelism=%s: %s",
                current[0], current[1], wanted[0], wanted[1], exc,
            )
            return False
        _applied = wanted
        return True
