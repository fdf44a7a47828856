"""One streamed request as the load generator saw it: the raw material every metric is computed from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Where a request falls in a level's closed loop: excluded before, measured, excluded after
# (sent after the quota only to keep the concurrency steady until the last measured one ends).
PHASES = ("warmup", "measured", "cooldown")


def phase_of(index: int, warmup: int, measured: int) -> str:
    """The phase of a level's index-th request (0-based) when `warmup` come first and `measured` follow."""
    return "warmup" if index < warmup else "measured" if index < warmup + measured else "cooldown"


@dataclass
class RequestRecord:
    level: float  # the level's concurrency C (closed loop) or request rate (open loop)
    phase: str
    sent: float  # CLOCK_MONOTONIC seconds (system-wide on Linux: comparable across processes)
    planned: float | None = None  # open loop: when the schedule meant it to be sent (same clock)
    end: float = 0.0
    ok: bool = False
    error: str = ""
    requested_tokens: int = 0
    output_tokens: int | None = None  # the server's own count (usage / meta_info)
    input_tokens: int | None = None
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk carrying tokens
    chunk_tokens: list[int] = field(default_factory=list)  # tokens in each such chunk
    # Where chunk_tokens come from: "meta_info" (/generate), "continuous_usage" (chat, exact per chunk),
    # "spread" (chat without a running count: the final total shared over the chunks), "" (unknown).
    count_source: str = ""

    @property
    def first_token(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def streamed_tokens(self) -> int:
        return sum(self.chunk_tokens)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)
