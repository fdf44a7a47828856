"""The workload of a sweep: what is sent at each concurrency level and how many requests are measured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Workload:
    levels: list[int]
    endpoint: str = "chat"  # chat: /v1/chat/completions; generate: SGLang's native /generate
    model: str = "default"
    input_tokens: int = 128
    output_tokens: int = 256
    seed: int = 0
    vocab_size: int = 32000  # /generate: token ids are drawn below it
    warmup: int = -1  # requests excluded first; -1: one per user
    rounds: int = 4  # measured requests = max(min_requests, rounds x C)
    min_requests: int = 16
    level_timeout: int = 600
    metrics_interval: float = 1.0
    processes: int = 1  # Locust --processes: load-generator cores (more than ~128 fast streams per core)

    def measured_requests(self, concurrency: int) -> int:
        return max(self.min_requests, self.rounds * concurrency)

    def extravars(self) -> dict[str, Any]:
        return {
            "bench_levels": self.levels, "bench_endpoint": self.endpoint, "bench_model": self.model,
            "bench_input_tokens": self.input_tokens, "bench_output_tokens": self.output_tokens, "bench_seed": self.seed,
            "bench_vocab_size": self.vocab_size,
            "bench_warmup": self.warmup, "bench_measured": {str(c): self.measured_requests(c) for c in self.levels},
            "bench_level_timeout": self.level_timeout, "bench_metrics_interval": self.metrics_interval,
            "bench_processes": self.processes,
        }  # fmt: skip
