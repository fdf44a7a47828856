"""Filters of the benchmark playbooks: thin adapters over benchmarks/ (no logic of their own)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    import benchmarks  # noqa: F401  (installed into the venv by bin/setup)
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import locust_command


def sglang_locust_level_options(level: dict[str, Any]) -> list[str]:
    """{users, run_time_s, host, records, requests, warmup, ...} -> one level's Locust options."""
    try:
        return locust_command.level_options(**level)
    except TypeError as exc:
        raise AnsibleFilterError(f"sglang_locust_level_options: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_locust_level_options": sglang_locust_level_options}
