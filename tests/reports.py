"""What a run says at its end, besides pytest's own summary (loaded by tests/conftest.py).

- Where the time went: wall time, the time of each tier (unit, servers, box, real_sglang) and of the
  slowest modules, and each xdist worker's busy time (wall minus busy is time it waited, e.g. for an
  `alone` turn), so that a change that adds minutes shows in CI's log.
- With `--count N` (pytest-repeat): how often each test failed out of its N runs, the flakiest first.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

import pytest

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
    reports = [
        report for outcome in ("passed", "failed", "error", "skipped") for report in terminalreporter.stats.get(outcome, [])
    ]
    reports = [report for report in reports if hasattr(report, "duration") and hasattr(report, "when")]
    _time_summary(terminalreporter, reports)
    count = getattr(config.option, "count", 1) or 1
    if count > 1:
        _repeat_summary(terminalreporter, reports, count)


def _time_summary(terminalreporter, reports: list) -> None:
    by_tier: dict[str, float] = defaultdict(float)
    by_module: dict[str, float] = defaultdict(float)
    by_worker: dict[str, float] = defaultdict(float)
    for report in reports:
        by_tier[tier(report.keywords)] += report.duration
        by_module[report.nodeid.split("::")[0]] += report.duration
        by_worker[_worker(report)] += report.duration
    wall = time.monotonic() - _started[0] if _started else 0.0
    terminalreporter.section("where the time went")
    terminalreporter.write_line(f"wall {wall / 60:.1f} min (pytest alone, set-up and lint not counted)")
    for name in ("unit", *reversed(TIERS)):
        terminalreporter.write_line(f"tier {name:<12} {by_tier.get(name, 0.0) / 60:6.1f} min of test time")
    for name, busy in sorted(by_worker.items()):
        terminalreporter.write_line(f"worker {name:<10} busy {busy / 60:6.1f} min, waiting or idle {(wall - busy) / 60:5.1f} min")
    for module, seconds in sorted(by_module.items(), key=lambda item: -item[1])[:12]:
        terminalreporter.write_line(f"{seconds / 60:6.1f} min  {module}")
    terminalreporter.write_line("timeline (minutes into the run, per worker):")
    for (worker, module), (first, last) in sorted(_spans.items(), key=lambda item: (item[0][0], item[1][0])):
        terminalreporter.write_line(f"  {worker:<5} {first:5.1f} - {last:5.1f}  {module}")


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
