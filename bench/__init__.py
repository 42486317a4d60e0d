"""Benchmarks of clusterplan against published measurements (``python bench/accuracy.py``)."""
