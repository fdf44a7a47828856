"""STAND-IN: the simulated hardware and model, from a file the test fixture writes.

Deliberately independent of the project's own memory estimate, so the two can disagree and be caught.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = "/etc/sglang-standin.json"


@dataclass(frozen=True)
class Simulation:
    gpu_count: int = 8
    gpu_memory_gib: float = 95.0
    gpu_name: str = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    driver_version: str = "580.95.05"
    weights_gib: float = 10.0
    load_seconds: float = 1.0
    prefill_ms: float = 20.0
    # Inter-token time of one request = itl_ms[layout key or "default"] + itl_slope_ms x running requests.
    itl_ms: dict[str, float] = field(default_factory=lambda: {"default": 10.0})
    itl_slope_ms: float = 0.0
    eos_after: int = 32
    # Tokens per streamed chunk when --stream-interval is not given (SGLang's default is 1).
    stream_interval: int = 1
    # False: ignore stream_options.continuous_usage_stats (a server that only sends the final usage).
    continuous_usage: bool = True
    # True: every generation request fails with HTTP 500 (the health check still passes).
    fail_requests: bool = False

    def base_itl_ms(self, tp: int, ep: int, pp: int, dp: int) -> float:
        return float(self.itl_ms.get(f"tp{tp}-ep{ep}-pp{pp}-dp{dp}", self.itl_ms.get("default", 10.0)))


def load() -> Simulation:
    path = Path(os.environ.get("SGLANG_STANDIN_CONFIG", DEFAULT_PATH))
    if not path.exists():
        return Simulation()
    return Simulation(**json.loads(path.read_text()))
