"""What the search ranks on, and when a candidate's levels stop (pure functions over level figures)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import repeats

OBJECTIVES = {
    "c1": "tok/s per request at C=1",
    "peak": "peak aggregate tok/s",
    "capacity": "aggregate tok/s at the highest concurrency within the SLO",
    "goodput": "good tok/s (output of requests within every --goodput bound), best level",
}
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
    if not usable(last):
        return f"C={last['concurrency']} failed"
    broken = [bound.name for bound in slo if not bound.met(last)]
    if broken:
        return f"C={last['concurrency']} broke the SLO ({', '.join(broken)})"
    if knee > 0 and len(levels) >= 2 and usable(levels[-2]):
        before, now = levels[-2]["aggregate_tok_s"], last["aggregate_tok_s"]
        if before > 0 and now < before * (1 + knee):
            return f"knee: C={last['concurrency']} gained {100 * (now / before - 1):+.1f}% over C={levels[-2]['concurrency']}"
    return ""


def bracket(levels: Sequence[Mapping[str, Any]], slo: Sequence[Bound]) -> tuple[int | None, int | None]:
    """(highest C within the SLO, lowest C above it that broke it) among the measured levels."""
    inside = [level["concurrency"] for level in levels if within(level, slo)]
    low = max(inside, default=None)
    above = [level["concurrency"] for level in levels if not within(level, slo) and (low is None or level["concurrency"] > low)]
    return low, min(above, default=None)


def next_probe(levels: Sequence[Mapping[str, Any]], slo: Sequence[Bound], *, resolution: float) -> int | None:
    """The concurrency to measure next to narrow the SLO capacity (bisection), or None when it is narrow enough.

    Narrow enough: the bracket [within, broke] is at most max(1, resolution x within) wide.
    """
    if not slo:
        return None
    low, high = bracket(levels, slo)
    if low is None or high is None or high - low <= max(1, int(resolution * low)):
        return None
    return (low + high) // 2


def scores(levels: Sequence[Mapping[str, Any]], slo: Sequence[Bound]) -> dict[str, Any]:
    """A candidate's figure for each objective (None where its levels do not give one) and where it was reached."""
    good = [level for level in levels if usable(level)]
    one = next((level for level in good if level["concurrency"] == 1), None)
    peak = max(good, key=lambda level: level["aggregate_tok_s"], default=None)
    inside = [level for level in good if within(level, slo)] if slo else []
    capacity = max(inside, key=lambda level: level["concurrency"], default=None)
    with_goodput = [level for level in good if level.get("goodput")]
    best_good = max(with_goodput, key=lambda level: level["goodput"]["good_tok_s"], default=None)
    return {
        "c1": one["decode_tok_s"]["p50"] if one else None,
        "peak": peak["aggregate_tok_s"] if peak else None,
        "peak_c": peak["concurrency"] if peak else None,
        "capacity": capacity["aggregate_tok_s"] if capacity else None,
        "capacity_c": capacity["concurrency"] if capacity else None,
        "capacity_bracket": list(bracket(levels, slo)) if slo else None,
        "goodput": best_good["goodput"]["good_tok_s"] if best_good else None,
        # 95% intervals, when the levels were measured with --repeats: a winner is clear when they separate.
        "c1_ci": _ci(one, "decode_tok_s_p50"),
        "peak_ci": _ci(peak, "aggregate_tok_s"),
        "goodput_c": best_good["concurrency"] if best_good else None,
    }


def _ci(level: Mapping[str, Any] | None, figure: str) -> list[float] | None:
    return (((level or {}).get("repeats") or {}).get(figure) or {}).get("ci95")


@dataclass(frozen=True)
class Winner:
    objective: str
    name: str
    value: float
    runner_up: str | None
    margin: float | None  # winner / runner-up - 1
    clear: bool

    def sentence(self) -> str:
        what = OBJECTIVES[self.objective]
        if self.runner_up is None:
            return f"{self.objective}: {self.name} ({what} {self.value:,.1f}; the only candidate measured)"
        verdict = "clear" if self.clear else "not clear: within the noise margin"
        return (
            f"{self.objective}: {self.name} ({what} {self.value:,.1f}), {100 * (self.margin or 0):+.1f}% over "
            f"{self.runner_up} ({verdict})"
        )


def winner(candidate_scores: Mapping[str, Mapping[str, Any]], objective: str, *, clear_margin: float) -> Winner | None:
    """The best candidate for one objective, its margin over the next, and whether that margin is clear."""
    ranked = sorted(((s[objective], name) for name, s in candidate_scores.items() if s.get(objective)), reverse=True)
    if not ranked:
        return None
    (best, name), rest = ranked[0], ranked[1:]
    if not rest:
        return Winner(objective, name, best, None, None, True)
    margin = best / rest[0][0] - 1
    intervals = candidate_scores[name].get(f"{objective}_ci"), candidate_scores[rest[0][1]].get(f"{objective}_ci")
    if all(intervals):  # measured with --repeats: clear only when the 95% intervals do not overlap
        return Winner(objective, name, best, rest[0][1], margin, repeats.separated(*intervals))
    return Winner(objective, name, best, rest[0][1], margin, margin >= clear_margin)


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Points (label, aggregate tok/s, tok/s per request) that no other point beats on both axes."""
    front = []
    for label, agg, per in points:
        dominated = any(a >= agg and p >= per and (a > agg or p > per) for _, a, p in points)
        if not dominated:
            front.append((label, agg, per))
    return sorted(front, key=lambda point: point[1])
