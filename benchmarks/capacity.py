"""Levels lowest first until the knee or the SLO breaks, then bisection of the SLO capacity, on one server.

Shared by `run --slo` and the layout search: the planned levels are one sweep (through ansible-runner) that
asks after each level whether to go on; each bisection probe is a sweep of its own, and with `--repeats` each
level is, measured that many times and merged. The decisions are benchmarks.slo's pure functions.
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
    sweep: Callable[..., SweepResult],
    *,
    bounds: Sequence[slo.Bound] = (),
    knee: float = 0.0,
    max_probes: int = MAX_PROBES,
    resolution: float = RESOLUTION,
    note: Callable[[str], None] = lambda _: None,
) -> Measured:
    """Each planned load in turn (concurrencies, or request rates in open loop), stopping at the knee or when
    a bound breaks; then the bracket around the SLO capacity is bisected (at most `max_probes` more levels).

    `sweep(workload, after_level=None)` measures a workload's levels (benchmarks.sweep.run_sweep). The planned
    loads go to one sweep that asks after each level whether to go on; with --repeats, one sweep per level.
    """
    done = Measured()
    planned: list[float] = sorted(workload.request_rates) if workload.open_loop else sorted(workload.levels)
    if workload.repeats == 1 and len(planned) > 1:
        _planned_in_one_sweep(workload, sweep, planned, done, bounds=bounds, knee=knee, note=note)
        planned = []
    # Past the knee (or a failed level) nothing more is measured; past the SLO, its capacity is narrowed.
    while done.status == "complete" and not (done.stopped and "SLO" not in done.stopped):
        if planned:
            load = planned.pop(0)
        elif done.probes < max_probes and done.levels and slo.usable(done.levels[-1]):
            probe = slo.next_probe(done.levels, bounds, resolution=resolution)
            if probe is None:
                break
            load, done.probes = probe, done.probes + 1
        else:
            break
        one = workload.at_load(load)
        name = _name(one, load)
        note(f"level {name}" + (" (narrowing the SLO capacity)" if done.probes and not planned else ""))
        sweeps: list[SweepResult] = []
        for _ in range(workload.repeats):  # --repeats: the level again on the same server, then merged
            sweeps.append(sweep(one))
            if sweeps[-1].status == "interrupted" or not sweeps[-1].levels:
                break
        last = sweeps[-1]
        if not _took(done, last, name, sum(s.locust_s for s in sweeps)):
            break
        done.levels.append(repeats.merge([s.levels[0] for s in sweeps]) if len(sweeps) > 1 else last.levels[0])
        if done.probes:
            continue
        done.stopped = slo.stop_reason(done.levels, knee=knee, slo=bounds)
        if done.stopped:
            planned = []
    done.levels.sort(key=level_load)
    if done.status == "complete" and any(level.get("status") != "ok" for level in done.levels):
        done.status = "partial" if any(slo.usable(level) for level in done.levels) else "failed"
    return done


def _name(workload: Workload, load: float) -> str:
    return level_name({"arrival": workload.arrival(workload.level_keys()[0])} if workload.open_loop else {"concurrency": load})


def _took(done: Measured, result: SweepResult, name: str, locust_s: float) -> bool:
    """A sweep's server and time kept; False (and why) when it was interrupted or measured nothing."""
    done.server = result.server or done.server
    done.locust_s += locust_s
    if result.status == "interrupted":
        done.levels.extend(result.levels)
        done.status = "interrupted"
        return False
    if not result.levels:
        done.status, done.stopped = "failed", f"{name}: {result.error or 'no records'}"
        return False
    return True


def _planned_in_one_sweep(
    workload: Workload,
    sweep: Callable[..., SweepResult],
    planned: list[float],
    done: Measured,
    *,
    bounds: Sequence[slo.Bound],
    knee: float,
    note: Callable[[str], None],
) -> None:
    """The planned loads, lowest first, in one sweep that stops after the level at the knee or past the SLO."""
    together = workload.at_loads(planned)
    names = [_name(workload.at_load(load), load) for load in planned]
    seen: list[dict[str, Any]] = []

    def after_level(level: dict[str, Any]) -> bool:
        seen.append(level)
        done.stopped = slo.stop_reason(seen, knee=knee, slo=bounds)
        if not done.stopped and len(seen) < len(names):
            note(f"level {names[len(seen)]}")
        return not done.stopped

    note(f"level {names[0]}")
    result = sweep(together, after_level=after_level)
    if _took(done, result, names[0], result.locust_s):
        done.levels.extend(result.levels)
        # Judged again on the final figures: the same records, so the same word unless the last level ran unreported.
        done.stopped = slo.stop_reason(done.levels, knee=knee, slo=bounds)


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
