"""What the search ranks on: each candidate's scores, the winners, the Pareto front (pure functions).

When levels stop (knee, SLO) and how the SLO capacity is bracketed live in benchmarks.slo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import repeats
from benchmarks.slo import Bound, bracket, usable, within

OBJECTIVES = {
    "c1": "tok/s per request at C=1",
    "peak": "peak aggregate tok/s",
    "capacity": "aggregate tok/s at the highest concurrency within the SLO",
    "goodput": "good tok/s (output of requests within every --goodput bound), best level",
}


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
