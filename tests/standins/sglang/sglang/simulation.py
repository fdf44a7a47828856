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
    # Another model on the same box (several servers on one machine): its weights by --model-path.
    weights_gib_by_model: dict[str, float] = field(default_factory=dict)
    load_seconds: float = 1.0
    prefill_ms: float = 20.0
    # Inter-token time of one request = itl_ms[layout key or "default"] + itl_slope_ms x running requests,
    # but never shorter than running / peak_tok_s[layout key or "default"] (the box's decode roofline:
    # aggregate output cannot pass it however many requests run). No peak entry: no roofline.
    itl_ms: dict[str, float] = field(default_factory=lambda: {"default": 10.0})
    itl_slope_ms: float = 0.0
    peak_tok_s: dict[str, float] = field(default_factory=dict)
    # At most this many requests decode at once (SGLang's --max-running-requests overrides it; 0: no cap);
    # the rest wait in a queue, so their TTFT grows as on a saturated server.
    max_running_requests: int = 0
    eos_after: int = 32
    # Tokens per streamed chunk when --stream-interval is not given (SGLang's default is 1).
    stream_interval: int = 1
    # False: ignore stream_options.continuous_usage_stats (a server that only sends the final usage).
    continuous_usage: bool = True
    # True: every generation request fails with HTTP 500 (the health check still passes).
    fail_requests: bool = False
    # Multi-node layouts: seconds a rank waits for the others at rank 0's --dist-init-addr (--dist-timeout wins).
    rendezvous_timeout_s: float = 30.0

    def base_itl_ms(self, tp: int, ep: int, pp: int, dp: int) -> float:
        return float(_per_layout(self.itl_ms, tp, ep, pp, dp) or 10.0)

    def peak(self, tp: int, ep: int, pp: int, dp: int) -> float | None:
        """The layout's aggregate decode roofline in tokens per second, if the simulation sets one."""
        value = _per_layout(self.peak_tok_s, tp, ep, pp, dp)
        return float(value) if value else None


def _per_layout(table: dict[str, float], tp: int, ep: int, pp: int, dp: int) -> float | None:
    return table.get(f"tp{tp}-ep{ep}-pp{pp}-dp{dp}", table.get("default"))


def load() -> Simulation:
    path = Path(os.environ.get("SGLANG_STANDIN_CONFIG", DEFAULT_PATH))
    if not path.exists():
        return Simulation()
    return Simulation(**json.loads(path.read_text()))
