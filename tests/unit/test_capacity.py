"""benchmarks/capacity.py: the planned levels in one sweep that stops where the knee or the SLO says, then the SLO's
bisection one level at a time, and with --repeats one sweep per level (a scripted sweep stands in for the playbook)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks import slo
from benchmarks.capacity import measure_levels
from benchmarks.sweep import SweepResult
from benchmarks.workload import Workload


def level(concurrency: int, aggregate: float, tpot_p99: float = 10.0) -> dict[str, Any]:
    return {
        "concurrency": concurrency,
        "status": "ok",
        "completed": 8,
        "aggregate_tok_s": aggregate,
        "tpot_ms": {"p99": tpot_p99},
    }


class ScriptedSweep:
    """Measures each concurrency as `figures` says; asks after_level after each, as run_sweep does."""

    def __init__(self, figures: dict[int, dict[str, Any]]) -> None:
        self.figures = figures
        self.calls: list[list[int]] = []  # the levels each sweep was asked for
        self.measured: list[int] = []  # the levels measured, in order

    def __call__(self, workload: Workload, after_level: Callable[[dict[str, Any]], bool] | None = None) -> SweepResult:
        self.calls.append(list(workload.levels))
        levels = []
        for concurrency in workload.levels:
            levels.append(self.figures[concurrency])
            self.measured.append(concurrency)
            if after_level is not None and not after_level(self.figures[concurrency]):
                break
        return SweepResult(status="complete", levels=levels, locust_s=1.0)


def test_the_planned_levels_run_in_one_sweep_that_stops_at_the_knee():
    sweep = ScriptedSweep({1: level(1, 50), 16: level(16, 700), 64: level(64, 720), 128: level(128, 900)})
    notes: list[str] = []
    done = measure_levels(Workload(levels=[64, 1, 128, 16]), sweep, knee=0.25, note=notes.append)
    assert sweep.calls == [[1, 16, 64, 128]] and sweep.measured == [1, 16, 64]  # C=128 never measured
    assert done.status == "complete" and done.stopped.startswith("knee: C=64 gained +2.9% over C=16")
    assert [lv["concurrency"] for lv in done.levels] == [1, 16, 64] and done.locust_s == 1.0
    assert notes == ["level C=1", "level C=16", "level C=64"]


def test_past_the_slo_the_capacity_is_bisected_one_level_at_a_time():
    figures = {c: level(c, 10.0 * c, tpot_p99=float(c)) for c in range(1, 129)}  # TPOT p99 = C ms
    sweep = ScriptedSweep(figures)
    done = measure_levels(Workload(levels=[1, 16, 64, 128]), sweep, bounds=[slo.parse_slo("tpot_p99=40")], max_probes=4)
    assert sweep.calls[0] == [1, 16, 64, 128] and sweep.measured[:3] == [1, 16, 64]  # C=64 broke it: C=128 skipped
    assert sweep.calls[1:] == [[40], [52], [46], [43]]  # bisected between C=16 (met) and C=64 (broke)
    assert "broke the SLO (tpot_p99)" in done.stopped and done.probes == 4
    assert slo.bracket(done.levels, [slo.parse_slo("tpot_p99=40")]) == (40, 43)


def test_a_failed_level_ends_the_measurement_and_says_so():
    failed = {"concurrency": 16, "status": "failed", "completed": 0, "error": "every request failed"}
    sweep = ScriptedSweep({1: level(1, 50), 16: failed, 64: level(64, 900)})
    done = measure_levels(Workload(levels=[1, 16, 64]), sweep, knee=0.25)
    assert sweep.measured == [1, 16] and done.stopped == "C=16 failed" and done.status == "partial"


def test_with_repeats_each_level_is_its_own_sweeps_merged():
    sweep = ScriptedSweep({1: level(1, 50), 16: level(16, 700), 64: level(64, 720)})
    done = measure_levels(Workload(levels=[1, 16, 64], repeats=2), sweep, knee=0.25)
    assert sweep.calls == [[1], [1], [16], [16], [64], [64]]
    assert [lv["concurrency"] for lv in done.levels] == [1, 16, 64] and done.stopped.startswith("knee: C=64")
