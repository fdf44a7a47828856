"""Benchmarks of SGLang layouts: the Locust workload, its metrics, and the wrapper running sweeps through ansible-runner."""
