"""The run's time summary (tests/reports.py): fixtures count as busy time, turn waits are told apart."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import reports


def report(when: str, duration: float, properties: list[tuple[str, object]] = ()) -> pytest.TestReport:
    where = ("tests/integration/test_x.py", 1, "test_y")
    made = pytest.TestReport(f"{where[0]}::test_y", where, {"box": 1}, "passed", None, when, duration=duration)
    made.user_properties = list(properties)
    made.node = SimpleNamespace(gateway=SimpleNamespace(id="gw0"))
    return made


class Written:
    def __init__(self, stats: dict) -> None:
        self.stats, self.lines = stats, []

    def section(self, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_setup_and_teardown_are_busy_time_and_a_turn_wait_is_not(monkeypatch):
    """A passed setup and teardown are filed under "" by pytest; the summary once left them out, and a box
    module's fixtures (a provisioned box, a search) showed as the worker's idle time."""
    waits = [(reports.TURN_WAIT, 30.0), (reports.TURN_WAIT_IN_CALL, 60.0)]
    stats = {"": [report("setup", 120.0, waits[:1]), report("teardown", 6.0, waits)], "passed": [report("call", 114.0, waits)]}
    monkeypatch.setattr(reports, "_started", [0.0])
    monkeypatch.setattr(reports.time, "monotonic", lambda: 600.0)
    monkeypatch.setattr(reports, "_spans", {})
    written = Written(stats)
    reports._time_summary(written, [r for filed in stats.values() for r in filed], {})
    # 240 s of reports, of which the call's 60 s were its exclusive turn's wait; 30 s more before the setup.
    assert "worker gw0        busy   3.0 min, waiting for a turn   1.5 min, idle   5.5 min" in written.lines
    assert "   4.0 min  tests/integration/test_x.py" in written.lines
    # A search's process waited 30 s more for its measurements' turns, inside its test's time.
    written = Written(stats)
    reports._time_summary(written, [r for filed in stats.values() for r in filed], {"gw0": 30.0})
    assert "worker gw0        busy   2.5 min, waiting for a turn   2.0 min, idle   5.5 min" in written.lines


def test_waits_are_summed_by_kind_and_other_properties_ignored():
    properties = [(reports.TURN_WAIT, 1.5), ("record", "x"), (reports.TURN_WAIT, 2), (reports.TURN_WAIT_IN_CALL, 4.0)]
    waits = reports.dict_of_waits(properties)
    assert waits == {reports.TURN_WAIT: 3.5, reports.TURN_WAIT_IN_CALL: 4.0}
