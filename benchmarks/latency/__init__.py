"""Benchmark harnesses and their committed results (outside the tfbatch package)."""
