"""One Locust level's command-line options, built here only: playbooks/tasks/benchmark_level.yml takes them
through the `sglang_locust_level_options` filter (plugins/filter/bench.py) and the load-generator harness
(benchmarks/harness.py) calls `level_options` itself. The workload's own options (`--bench-input-tokens=...`)
come from `Workload.locust_options`. Pure: no Locust import (importing Locust patches the whole process)."""

from __future__ import annotations

from typing import Any


def level_options(
    *,
    users: Any,
    run_time_s: Any,
    host: str,
    records: Any,
    requests: Any,
    warmup: Any = -1,
    request_rate: Any = 0,
    prompts: Any = "",
    api_key_file: Any = "",
    loglevel: str = "WARNING",
) -> list[str]:
    """Headless Locust for one level: `users` in a closed loop (1 with a request rate: one scheduler per
    process), the first `warmup` requests (-1: one per user) left out of the `requests` measured, records to `records`.
    Values may come as Ansible's strings; an empty `prompts` or `api_key_file` means none."""
    return [
        "--headless",
        "--only-summary",
        f"--loglevel={loglevel}",
        f"--users={users}",
        f"--spawn-rate={users}",
        f"--run-time={run_time_s}s",
        # At the stop every measured request has ended: those still in flight only kept the load steady and are
        # recorded as cut off, so the level ends at once rather than waiting on them (a hung one to the timeout).
        "--stop-timeout=0",
        f"--host={host}",
        f"--bench-warmup={warmup}",
        f"--bench-requests={requests}",
        f"--bench-request-rate={request_rate}",
        f"--bench-prompts={prompts}",
        f"--bench-records={records}",
        f"--bench-api-key-file={api_key_file}",
    ]
