"""Latency bounds (--slo) and how far to load a server: the knee, the SLO, and bisection of the capacity.

Pure functions over stored level figures, closed loop (by concurrency) or open loop (by request rate).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.workload import level_load, level_name

_SLO = re.compile(r"(ttft|tpot|itl|e2e)_(p50|p90|p95|p99|mean)=([0-9]+(?:\.[0-9]*)?)")
_FIGURE = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e": "e2e_ms"}


@dataclass(frozen=True)
class Bound:
    metric: str  # ttft, tpot, itl, e2e
    stat: str  # p50, p90, p95, p99, mean
    limit_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.stat}"

    def value(self, level: Mapping[str, Any]) -> float | None:
        figure = level.get(_FIGURE[self.metric]) or {}
        return figure.get(self.stat)

    def met(self, level: Mapping[str, Any]) -> bool:
        value = self.value(level)
        return value is not None and value <= self.limit_ms


def parse_slo(text: str) -> Bound:
    """`tpot_p99=50` -> the bound TPOT p99 <= 50 ms."""
    match = _SLO.fullmatch(text.strip())
    if not match:
        raise ValueError(
            f"--slo {text!r}: write METRIC_STAT=MS with METRIC one of ttft, tpot, itl, e2e and STAT one of p50, p90, p95, "
            "p99, mean, e.g. --slo tpot_p99=50"
        )
    return Bound(match[1], match[2], float(match[3]))


def usable(level: Mapping[str, Any]) -> bool:
    return level.get("status") in ("ok", "partial") and bool(level.get("completed"))


def within(level: Mapping[str, Any], slo: Sequence[Bound]) -> bool:
    return usable(level) and all(bound.met(level) for bound in slo)


def stop_reason(levels: Sequence[Mapping[str, Any]], *, knee: float, slo: Sequence[Bound]) -> str:
    """Why no higher concurrency is worth measuring after these levels ('' to go on).

    The knee: the last level raised aggregate tok/s by less than `knee` (a fraction) over the one before.
    The SLO: the last level broke a bound (higher concurrency only makes latency worse).
    """
    if not levels:
        return ""
    last = levels[-1]
    if last.get("status") == "hung":
        return f"{level_name(last)} hung: {last.get('error') or 'no token with requests open'}"
    if not usable(last):
        return f"{level_name(last)} failed"
    broken = [bound.name for bound in slo if not bound.met(last)]
    if broken:
        return f"{level_name(last)} broke the SLO ({', '.join(broken)})"
    if knee > 0 and len(levels) >= 2 and usable(levels[-2]):
        before, now = levels[-2]["aggregate_tok_s"], last["aggregate_tok_s"]
        if before > 0 and now < before * (1 + knee):
            return f"knee: {level_name(last)} gained {100 * (now / before - 1):+.1f}% over {level_name(levels[-2])}"
    return ""


def bracket(levels: Sequence[Mapping[str, Any]], slo: Sequence[Bound]) -> tuple[float | None, float | None]:
    """(highest load within the SLO, lowest load above it that broke it) among the measured levels.

    The load is the concurrency (closed loop, as an int) or the request rate (open loop).
    """
    inside = [_load(level) for level in levels if within(level, slo)]
    low = max(inside, default=None)
    above = [_load(level) for level in levels if not within(level, slo) and (low is None or _load(level) > low)]
    return low, min(above, default=None)


def next_probe(levels: Sequence[Mapping[str, Any]], slo: Sequence[Bound], *, resolution: float) -> float | None:
    """The load to measure next to narrow the SLO capacity (bisection), or None when it is narrow enough.

    Narrow enough: the bracket [within, broke] is at most resolution x within wide (and at least one
    request in flight, in closed loop). Rates are bisected to three significant figures.
    """
    if not slo:
        return None
    low, high = bracket(levels, slo)
    if low is None or high is None:
        return None
    if isinstance(low, int) and isinstance(high, int):
        return None if high - low <= max(1, int(resolution * low)) else (low + high) // 2
    middle = float(f"{(low + high) / 2:.3g}")
    return None if high - low <= resolution * low or middle in (low, high) else middle


def _load(level: Mapping[str, Any]) -> float:
    """A level's concurrency as an int (closed loop) or its request rate (open loop)."""
    return level["concurrency"] if not level.get("arrival") else level_load(level)
