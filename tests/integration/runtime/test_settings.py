"""Thread settings applied to a live TensorFlow runtime."""

from __future__ import annotations

from tfbatch.runtime import RuntimeSettings, configure_threads


def test_configure_threads_after_tf_started_warns_not_crashes(caplog, linear_v1):
    import tensorflow as tf

    from tfbatch.runtime import Servable

    Servable.load("m", 1, linear_v1).run(None, {"x": [[1.0, 2.0, 3.0]]})  # TF context is live now
    wanted = tf.config.threading.get_intra_op_parallelism_threads() + 3
    ok = configure_threads(RuntimeSettings(intra_op_parallelism=wanted))
    assert ok is False
    assert "cannot apply" in caplog.text
