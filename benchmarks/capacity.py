"""Levels lowest first until the knee or the SLO breaks, then bisection of the SLO capacity, on one server.

Shared by `run --slo` and the layout search: each level is one sweep (through ansible-runner), measured
`--repeats` times and merged; the decisions are benchmarks.slo's pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import repeats, slo
from benchmarks.sweep import SweepResult
from benchmarks.workload import Workload, level_load, level_name

MAX_PROBES = 4  # bisection levels at most, after the planned ones
RESOLUTION = 0.1  # stop bisecting when the bracket is this narrow (a fraction of its lower end)


@dataclass
class Measured:
    levels: list[dict[str, Any]] = field(default_factory=list)  # by load, lowest first
    status: str = "complete"  # complete, partial, failed, interrupted
    stopped: str = ""  # why no higher level was measured ('' when every planned level was)
    server: dict[str, Any] = field(default_factory=dict)
    locust_s: float = 0.0
    probes: int = 0


def measure_levels(
    workload: Workload,
    sweep: Callable[[Workload], SweepResult],
    *,
    bounds: Sequence[slo.Bound] = (),
    knee: float = 0.0,
    max_probes: int = MAX_PROBES,
    resolution: float = RESOLUTION,
    note: Callable[[str], None] = lambda _: None,
) -> Measured:
    """Each planned load in turn (concurrencies, or request rates in open loop), stopping at the knee or when
    a bound breaks; then the bracket around the SLO capacity is bisected (at most `max_probes` more levels)."""
    done = Measured()
    planned: list[float] = sorted(workload.request_rates) if workload.open_loop else sorted(workload.levels)
    while True:
        if planned:
            load = planned.pop(0)
        elif done.status == "complete" and done.probes < max_probes and done.levels and slo.usable(done.levels[-1]):
            probe = slo.next_probe(done.levels, bounds, resolution=resolution)
            if probe is None:
                break
            load, done.probes = probe, done.probes + 1
        else:
            break
        one = workload.at_load(load)
        name = level_name({"arrival": one.arrival(one.level_keys()[0])} if one.open_loop else {"concurrency": load})
        note(f"level {name}" + (" (narrowing the SLO capacity)" if done.probes and not planned else ""))
        sweeps: list[SweepResult] = []
        for _ in range(workload.repeats):  # --repeats: the level again on the same server, then merged
            sweeps.append(sweep(one))
            if sweeps[-1].status == "interrupted" or not sweeps[-1].levels:
                break
        last = sweeps[-1]
        done.server = last.server or done.server
        done.locust_s += sum(s.locust_s for s in sweeps)
        if last.status == "interrupted":
            done.levels.extend(last.levels)
            done.status = "interrupted"
            break
        if not last.levels:
            done.status, done.stopped = "failed", f"{name}: {last.error or 'no records'}"
            break
        done.levels.append(repeats.merge([s.levels[0] for s in sweeps]) if len(sweeps) > 1 else last.levels[0])
        if done.probes:
            continue
        done.stopped = slo.stop_reason(done.levels, knee=knee, slo=bounds)
        if done.stopped:
            planned = []
            if "SLO" not in done.stopped:
                break
    done.levels.sort(key=level_load)
    if done.status == "complete" and any(level.get("status") != "ok" for level in done.levels):
        done.status = "partial" if any(slo.usable(level) for level in done.levels) else "failed"
    return done


def capacity_sentence(levels: Sequence[dict[str, Any]], bounds: Sequence[slo.Bound]) -> str:
    """What the bisection found, in words: the highest load within every bound and the lowest that broke one."""
    low, high = slo.bracket(levels, bounds)
    open_loop = any(level.get("arrival") for level in levels)
    unit = " requests/s" if open_loop else " in flight"
    wanted = " and ".join(f"{b.name} <= {b.limit_ms:g} ms" for b in bounds)
    if low is None:
        return f"SLO capacity ({wanted}): no measured level met it" + (f"; the lowest, {high:g}{unit}, broke it" if high else "")
    if high is None:
        return f"SLO capacity ({wanted}): at least {low:g}{unit} (every measured level met it; measure higher)"
    return f"SLO capacity ({wanted}): {low:g}{unit} (met), {high:g}{unit} broke it"
