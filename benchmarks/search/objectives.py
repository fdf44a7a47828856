"""What the search ranks on: each candidate's scores and the Pareto front (pure functions; the winners: decision.py).

When levels stop (knee, SLO) and how the SLO capacity is bracketed live in benchmarks.slo.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import gpu_telemetry
from benchmarks.slo import Bound, bracket, usable, within

Level = Mapping[str, Any]


@dataclass(frozen=True)
class Objective:
    """One thing the search ranks on: which of a candidate's usable levels gives its figure, and the figure."""

    description: str
    pick: Callable[[Sequence[Level], Sequence[Bound]], Level | None]  # the level (None: no figure)
    figure: Callable[[Level], float]
    asked: Callable[[Mapping[str, Any]], bool] = lambda _: True  # from a search's state or options
    # Why the level's figure is too noisy to call anything clear on (None: it is not); a figure it names is
    # still shown and ranked, but never wins "clear", so ties go to the plainer server.
    unsettled: Callable[[Level], str | None] = lambda _: None


def _best(levels: Sequence[Level], key: Callable[[Level], float]) -> Level | None:
    return max((level for level in levels if key(level)), key=key, default=None)


def _per_joule(level: Level) -> float:
    power = _power_w(level)
    return round(level["aggregate_tok_s"] / power, 4) if power else 0.0


# A median power over fewer dmon samples than this moves by more than the clear margin from one run of a
# level to the next (bin/rehearse's 1-3 s levels, 7 Dec 2026: ep8 with a flag +126%, then below plain ep8).
MIN_POWER_SAMPLES = 5


def _power_unsettled(level: Level) -> str | None:
    samples = (level.get("gpus") or {}).get("samples")
    if samples is None or samples >= MIN_POWER_SAMPLES:
        return None
    return f"{samples} of {MIN_POWER_SAMPLES} power samples a GPU at C={level['concurrency']}"


# What the search can rank on, each reported with the concurrency that gave it (`<name>_c`). To add one: a row
# here (docs/extending.md); the report, the winners, the policy's incumbents and --objective take it as it is.
OBJECTIVES: dict[str, Objective] = {
    "c1": Objective(
        "tok/s per request at C=1",
        lambda levels, slo: next((level for level in levels if level["concurrency"] == 1), None),
        lambda level: level["decode_tok_s"]["p50"],
    ),
    "peak": Objective(
        "peak aggregate tok/s",
        lambda levels, slo: _best(levels, lambda level: level["aggregate_tok_s"]),
        lambda level: level["aggregate_tok_s"],
    ),
    "capacity": Objective(
        "aggregate tok/s at the highest concurrency within the SLO",
        lambda levels, slo: (
            max((lv for lv in levels if within(lv, slo)), key=lambda lv: lv["concurrency"], default=None) if slo else None
        ),
        lambda level: level["aggregate_tok_s"],
        asked=lambda state: bool(state.get("slo")),
    ),
    "goodput": Objective(
        "good tok/s (output of requests within every --goodput bound), best level",
        lambda levels, slo: _best(levels, lambda level: (level.get("goodput") or {}).get("good_tok_s") or 0.0),
        lambda level: level["goodput"]["good_tok_s"],
        asked=lambda state: bool((state.get("workload") or {}).get("goodput")),
    ),
    "tok_per_joule": Objective(
        "output tokens per joule of GPU energy (aggregate tok/s over the GPUs' summed power), best level",
        lambda levels, slo: _best(levels, _per_joule),
        _per_joule,
        asked=lambda state: float((state.get("workload") or {}).get("gpu_interval") or 0) > 0,
        unsettled=_power_unsettled,
    ),
}


def asked(state_or_options: Mapping[str, Any]) -> dict[str, bool]:
    """Which objectives a search gives figures for (each row's `asked`: capacity with --slo, goodput with
    --goodput, tokens per joule with GPU telemetry); c1 and peak always."""
    return {name: objective.asked(state_or_options) for name, objective in OBJECTIVES.items() if name not in ("c1", "peak")}


def scores(levels: Sequence[Level], slo: Sequence[Bound]) -> dict[str, Any]:
    """A candidate's figure for each objective (None where its levels do not give one) and the concurrency of
    its level, with `<name>_unsettled` where the figure is too noisy to judge; the SLO capacity's bracket, and
    95% intervals where the levels were measured with --repeats."""
    good = [level for level in levels if usable(level)]
    out: dict[str, Any] = {}
    for name, objective in OBJECTIVES.items():
        level = objective.pick(good, slo)
        out[name] = objective.figure(level) if level else None
        out[f"{name}_c"] = level["concurrency"] if level else None
        why = objective.unsettled(level) if level else None
        if why:
            out[f"{name}_unsettled"] = why
    out["capacity_bracket"] = list(bracket(levels, slo)) if slo else None
    # A winner is clear when the intervals separate.
    out["c1_ci"] = _ci(OBJECTIVES["c1"].pick(good, slo), "decode_tok_s_p50")
    out["peak_ci"] = _ci(OBJECTIVES["peak"].pick(good, slo), "aggregate_tok_s")
    return out


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
