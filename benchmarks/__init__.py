"""Benchmarks of SGLang layouts: the Locust workload (locustfile.py), its metrics, and the wrapper that runs sweeps through ansible-runner."""
