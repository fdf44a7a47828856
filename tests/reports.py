"""What a run says at its end, besides pytest's own summary (loaded by tests/conftest.py).

- Where the time went: wall time, the time of each tier (unit, servers, box, real_sglang) and of the
  slowest modules (fixtures included), and each xdist worker's time busy, waiting for a turn (the
  `alone` tests' lock, tests/alone.py) and idle, so that a change that adds minutes shows in CI's log.
- With `--count N` (pytest-repeat): how often each test failed out of its N runs, the flakiest first.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

import pytest

from tests import alone

TURN_WAIT = "turn_wait_s"  # a user property (tests/conftest.py): seconds a test waited for its turns
TURN_WAIT_IN_CALL = "turn_wait_in_call_s"  # the part of it inside the test's call (an `alone` test's exclusive turn)
TIERS = ("real_sglang", "box", "servers")  # the first marker a test carries names its tier; none: unit
_started: list[float] = []
_spans: dict[tuple[str, str], list[float]] = {}  # (worker, module) -> [first report, last report], minutes into the run


def pytest_sessionstart(session: pytest.Session) -> None:
    _started.append(time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """When each module's reports reached the controller, per worker: the run's timeline."""
    if not _started:
        return
    now = (time.monotonic() - _started[0]) / 60
    module = report.nodeid.split("::")[0]
    span = _spans.setdefault((_worker(report), module), [now - report.duration / 60, now])
    span[1] = now


def _worker(report: pytest.TestReport) -> str:
    return getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")


def tier(keywords: dict) -> str:
    return next((name for name in TIERS if name in keywords), "unit")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    # Every phase's report: a passed setup or teardown is filed under "", and fixtures are often most of the time.
    reports = [
        report
        for filed in terminalreporter.stats.values()
        for report in filed
        if isinstance(report, pytest.TestReport) and report.when in ("setup", "call", "teardown")
    ]
    run_id = getattr(config.option, "testrunuid", None)
    _time_summary(terminalreporter, reports, alone.children_waits(run_id) if run_id else {})
    count = getattr(config.option, "count", 1) or 1
    if count > 1:
        _repeat_summary(terminalreporter, reports, count)


def _time_summary(terminalreporter, reports: list, children_waits: dict[str, float]) -> None:
    """`children_waits`: what tests' children waited for turns, by worker, inside their tests' time."""
    by_tier: dict[str, float] = defaultdict(float)
    by_module: dict[str, float] = defaultdict(float)
    by_worker: dict[str, float] = defaultdict(float)
    waited: dict[str, float] = defaultdict(float)
    for report in reports:
        by_tier[tier(report.keywords)] += report.duration
        by_module[report.nodeid.split("::")[0]] += report.duration
        by_worker[_worker(report)] += report.duration
        if report.when == "teardown":  # the last phase's properties hold every wait of the test
            properties = dict_of_waits(report.user_properties)
            waited[_worker(report)] += properties[TURN_WAIT] + properties[TURN_WAIT_IN_CALL]
            by_worker[_worker(report)] -= properties[TURN_WAIT_IN_CALL]
    for worker, seconds in children_waits.items():
        waited[worker] += seconds
        by_worker[worker] -= seconds
    wall = time.monotonic() - _started[0] if _started else 0.0
    terminalreporter.section("where the time went")
    terminalreporter.write_line(f"wall {wall / 60:.1f} min (pytest alone, set-up and lint not counted)")
    for name in ("unit", *reversed(TIERS)):
        terminalreporter.write_line(f"tier {name:<12} {by_tier.get(name, 0.0) / 60:6.1f} min of test time")
    for name, busy in sorted(by_worker.items()):
        idle, wait = wall - busy - waited[name], waited[name]
        terminalreporter.write_line(
            f"worker {name:<10} busy {busy / 60:5.1f} min, waiting for a turn {wait / 60:5.1f} min, idle {idle / 60:5.1f} min"
        )
    for module, seconds in sorted(by_module.items(), key=lambda item: -item[1])[:12]:
        terminalreporter.write_line(f"{seconds / 60:6.1f} min  {module}")
    terminalreporter.write_line("timeline (minutes into the run, per worker):")
    for (worker, module), (first, last) in sorted(_spans.items(), key=lambda item: (item[0][0], item[1][0])):
        terminalreporter.write_line(f"  {worker:<5} {first:5.1f} - {last:5.1f}  {module}")


def dict_of_waits(properties: list[tuple[str, object]]) -> dict[str, float]:
    """A test's turn waits from its report's user properties, summed by kind (none outside xdist)."""
    waits = {TURN_WAIT: 0.0, TURN_WAIT_IN_CALL: 0.0}
    for name, value in properties:
        if name in waits and isinstance(value, (int, float)):
            waits[name] += float(value)
    return waits


def _repeat_summary(terminalreporter, reports: list, count: int) -> None:
    suffix = re.compile(rf"(\[|-)\d+-{count}\]$")  # pytest-repeat's id: test[1-5], or test[chat-1-5]
    runs: dict[str, list[bool]] = {}
    for report in reports:
        if report.when == "call" or report.outcome == "failed":
            name = suffix.sub(lambda m: "]" if m.group(1) == "-" else "", report.nodeid)
            runs.setdefault(name, []).append(report.outcome == "passed")
    terminalreporter.section(f"repeated {count} times: failures per test")
    for name, passes in sorted(runs.items(), key=lambda item: (item[1].count(True) - len(item[1]), item[0])):
        terminalreporter.write_line(f"{len(passes) - passes.count(True)}/{len(passes)} failed  {name}")
