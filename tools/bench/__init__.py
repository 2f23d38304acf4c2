"""Benchmarks: each module is `edgetwin bench NAME` and prints one JSON object."""
