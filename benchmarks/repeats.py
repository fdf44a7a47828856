"""Levels measured several times (--repeats N): each headline figure as the mean with a 95% interval.

The interval is Student's t over the repeats (scipy), so two layouts are called different only when
their intervals do not overlap.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

from benchmarks.workload import level_id, level_load

# The figures a comparison decides on: name -> where it sits in a level's figures.
HEADLINE = {
    "aggregate_tok_s": ("aggregate_tok_s",),
    "decode_tok_s_p50": ("decode_tok_s", "p50"),
    "ttft_ms_p50": ("ttft_ms", "p50"),
    "itl_ms_p50": ("itl_ms", "p50"),
}


def interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean and 95% t-interval of the values (no interval from a single value)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return {"n": n, "mean": mean, "ci95": None, "values": list(values)}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "ci95": [mean - half, mean + half], "values": list(values)}


def separated(a: Sequence[float] | None, b: Sequence[float] | None) -> bool:
    """Whether two 95% intervals do not overlap (False when either is missing)."""
    return bool(a and b) and (a[0] > b[1] or b[0] > a[1])


def _get(level: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = level
    for key in path:
        value = (value or {}).get(key) if isinstance(value, dict) else None
    return value


def _set(level: dict[str, Any], path: tuple[str, ...], value: float) -> None:
    for key in path[:-1]:
        level = level.setdefault(key, {})
    level[path[-1]] = value


def merge(repeats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One level measured several times -> the first repeat's figures with each headline replaced by the mean,
    and `repeats` holding every headline's mean, interval and values. Failed repeats count in the status only."""
    usable = [level for level in repeats if level.get("status") in ("ok", "partial") and level.get("completed")]
    merged = copy.deepcopy(usable[0] if usable else repeats[0])
    statuses = {level.get("status") for level in repeats}
    merged["status"] = "ok" if statuses == {"ok"} else "failed" if not usable else "partial"
    block: dict[str, Any] = {"n": len(repeats), "usable": len(usable)}
    for name, path in HEADLINE.items():
        values = [v for level in usable if (v := _get(level, path)) is not None]
        if values:
            block[name] = interval(values)
            _set(merged, path, block[name]["mean"])
    merged["repeats"] = block
    return merged


def merge_runs(runs: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several sweeps' levels -> one merged level per concurrency (or request rate), in order."""
    by_level: dict[str, list[dict[str, Any]]] = {}
    for levels in runs:
        for level in levels:
            by_level.setdefault(level_id(level), []).append(level)
    return [merge(group) for group in sorted(by_level.values(), key=lambda group: level_load(group[0]))]
