"""tfbatch: fast TensorFlow batch inference, serving and training on image data."""

__version__ = "0.1.0"
