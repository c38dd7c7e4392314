"""TFRecord files agree with TensorFlow's own writer and reader, plain and gzipped."""

from __future__ import annotations

import io

from tfbatch.records import iter_records, open_input, write_tfrecord

PAYLOADS = [b"", b"x", bytes(range(256)) * 40, b"\n\r\n" * 7, b"\x0a\x23\xd7\xce" * 3]


def test_tf_written_files_read_back(tmp_path):
    import tensorflow as tf

    plain, gz = tmp_path / "a.tfrecord", tmp_path / "a.tfrecord.gz"
    with tf.io.TFRecordWriter(str(plain)) as writer:
        for p in PAYLOADS:
            writer.write(p)
    with tf.io.TFRecordWriter(str(gz), options=tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for p in PAYLOADS:
            writer.write(p)

    blob = plain.read_bytes()
    assert blob == write_tfrecord(PAYLOADS)  # byte-identical framing
    with plain.open("rb") as f:
        out = list(iter_records(f, "TFRecord", source=str(plain), chunk_size=100))
    assert [r.data for r in out] == PAYLOADS and not any(r.error for r in out)
    with gz.open("rb") as f:
        out = list(iter_records(open_input(f, "Gzip"), "TFRecord"))
    assert [r.data for r in out] == PAYLOADS and not any(r.error for r in out)


def test_our_bytes_read_by_tf_dataset(tmp_path):
    import tensorflow as tf

    path = tmp_path / "ours.tfrecord"
    path.write_bytes(write_tfrecord(PAYLOADS))
    got = [t.numpy() for t in tf.data.TFRecordDataset(str(path))]
    assert got == PAYLOADS
    # and a serialized tf.train.Example survives the trip intact
    example = tf.train.Example(
        features=tf.train.Features(
            feature={"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\xff\xd8jpeg"]))}
        )
    )
    (rec,) = iter_records(io.BytesIO(write_tfrecord([example.SerializeToString()])), "TFRecord")
    parsed = tf.train.Example.FromString(rec.data)
    assert parsed.features.feature["image/encoded"].bytes_list.value[0] == b"\xff\xd8jpeg"
