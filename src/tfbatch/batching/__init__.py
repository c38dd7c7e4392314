"""The dynamic batcher: coalesces requests into model batches (no TensorFlow here)."""

from tfbatch.batching.batcher import DynamicBatcher

__all__ = ["DynamicBatcher"]
