"""What the search ranks on: each candidate's scores and the Pareto front (pure functions; the winners: decision.py).

When levels stop (knee, SLO) and how the SLO capacity is bracketed live in benchmarks.slo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks import gpu_telemetry
from benchmarks.slo import Bound, bracket, usable, within

OBJECTIVES = {
    "c1": "tok/s per request at C=1",
    "peak": "peak aggregate tok/s",
    "capacity": "aggregate tok/s at the highest concurrency within the SLO",
    "goodput": "good tok/s (output of requests within every --goodput bound), best level",
    "tok_per_joule": "output tokens per joule of GPU energy (aggregate tok/s over the GPUs' summed power), best level",
}


def asked(state_or_options: Mapping[str, Any]) -> dict[str, bool]:
    """Which objectives a search gives figures for: capacity with --slo, goodput with --goodput, tokens per
    joule with GPU telemetry (--gpu-interval above 0); c1 and peak always."""
    workload = state_or_options.get("workload") or {}
    return {
        "capacity": bool(state_or_options.get("slo")),
        "goodput": bool(workload.get("goodput")),
        "tok_per_joule": float(workload.get("gpu_interval") or 0) > 0,
    }


def scores(levels: Sequence[Mapping[str, Any]], slo: Sequence[Bound]) -> dict[str, Any]:
    """A candidate's figure for each objective (None where its levels do not give one) and where it was reached."""
    good = [level for level in levels if usable(level)]
    one = next((level for level in good if level["concurrency"] == 1), None)
    peak = max(good, key=lambda level: level["aggregate_tok_s"], default=None)
    inside = [level for level in good if within(level, slo)] if slo else []
    capacity = max(inside, key=lambda level: level["concurrency"], default=None)
    energy = [(level["aggregate_tok_s"] / power, level["concurrency"]) for level in good if (power := _power_w(level))]
    most_per_joule = max(energy, default=None)
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
        "tok_per_joule": round(most_per_joule[0], 4) if most_per_joule else None,
        "tok_per_joule_c": most_per_joule[1] if most_per_joule else None,
    }


def _power_w(level: Mapping[str, Any]) -> float:
    """The GPUs' summed power during the level (each GPU's median, from nvidia-smi dmon), 0 without telemetry."""
    figures = gpu_telemetry.headline(level.get("gpus"))
    return float(figures["power_w"]) if figures and figures.get("power_w") else 0.0


def _ci(level: Mapping[str, Any] | None, figure: str) -> list[float] | None:
    return (((level or {}).get("repeats") or {}).get(figure) or {}).get("ci95")


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Points (label, aggregate tok/s, tok/s per request) that no other point beats on both axes."""
    front = []
    for label, agg, per in points:
        dominated = any(a >= agg and p >= per and (a > agg or p > per) for _, a, p in points)
        if not dominated:
            front.append((label, agg, per))
    return sorted(front, key=lambda point: point[1])
