"""How a batch of images is cut into decode shards (records/imagedecode.shard_size)."""

import pytest

from tfbatch.records.imagedecode import MIN_SHARD_IMAGES, ImageDecoder, ImageTarget, shard_size
from tfbatch.runtime.placement import usable_cores


@pytest.mark.parametrize(("images", "workers", "least", "size"), [
    (64, 2, 16, 32),   # 2 cores: two shards, as before the minimum
    (64, 4, 16, 16),   # a process with 4 cores of 16
    (64, 16, 16, 16),  # one process on 16 cores: 4 shards of 16, not 16 of 4
    (20, 2, 16, 20),   # too few for two shards of the minimum: one call
    (15, 8, 16, 15),
    (33, 2, 16, 17),
    (12, 3, 1, 4),     # no minimum: one shard per worker
    (1, 4, 16, 1),
    (0, 4, 16, 0),
])
def test_shard_size(images, workers, least, size):
    assert shard_size(images, workers, least) == size


@pytest.mark.parametrize("images", range(0, 200, 7))
@pytest.mark.parametrize("workers", [1, 2, 3, 4, 16])
def test_shards_cover_the_batch_within_the_workers_and_the_minimum(images, workers):
    size = shard_size(images, workers, MIN_SHARD_IMAGES)
    if images == 0:
        assert size == 0
        return
    shards = -(-images // size)
    assert shards <= workers and shards * size >= images
    assert shards == 1 or size >= MIN_SHARD_IMAGES


def test_the_decoder_threads_default_to_the_usable_cores():
    target = ImageTarget(8, 8, 3, "float32")
    assert ImageDecoder(target).workers == usable_cores()
    assert ImageDecoder(target, workers=3).workers == 3
    assert ImageDecoder(target).min_shard == MIN_SHARD_IMAGES
