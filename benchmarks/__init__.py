"""Benchmarks of SGLang layouts (the Locust workload and its wrapper arrive with the benchmark issue)."""
