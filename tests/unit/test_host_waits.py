"""Waits on the host that answer as soon as what they wait for is there: the host-side swap followed
(plugins/modules/sglang_swap_follow.py), its job's status file read as async_status reads it; and the benchmark's
gate between levels (plugins/modules/sglang_wait_file.py). Each gives up at its bound."""

from __future__ import annotations

import json
from types import ModuleType

import pytest

from tests.unit.host_modules import host_helpers, host_module


@pytest.fixture
def follow_module(monkeypatch) -> ModuleType:
    return host_module("sglang_swap_follow", monkeypatch)


def test_the_status_file_reads_as_async_status_reads_it(follow_module, tmp_path):
    path = tmp_path / "123.456"
    assert follow_module.job_status(str(path)) is None  # no such job
    path.write_text('{"started": 1, "finished": 0, "ansible_job_id": "123.456"}')
    assert follow_module.job_status(str(path))["finished"] is False
    path.write_text('{"started": 1, "fin')  # the wrapper mid-write: still running
    assert follow_module.job_status(str(path)) == {"started": True, "finished": False}
    path.write_text(json.dumps({"outcome": "swapped", "changed": True}))  # the module's own result
    assert follow_module.job_status(str(path)) == {"outcome": "swapped", "changed": True, "started": True, "finished": True}
    path.write_text(json.dumps({"failed": 1, "finished": 1, "started": 1, "msg": "Timeout exceeded"}))
    assert follow_module.job_status(str(path))["finished"] is True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_poll_answers_when_done_and_no_later_than_its_bound():
    """plugins/module_utils/sglang_host.py's poll, which both waits use."""
    poll = host_helpers().poll
    clock = Clock()
    running, done = {"started": True, "finished": False}, {"started": True, "finished": True, "outcome": "swapped"}
    # Finished on the fourth read: answered then, after three intervals.
    reads = iter([running, running, running, done])
    assert poll(lambda: next(reads), lambda status: status["finished"], 5.0, 0.1, clock, clock.sleep) == done
    assert clock.now == pytest.approx(0.3)
    # Never done: the bound ends it, the last sleep cut to fit, and the last read is the answer.
    clock = Clock()
    assert poll(lambda: running, lambda status: status["finished"], 1.0, 0.3, clock, clock.sleep) == running
    assert clock.now == pytest.approx(1.0) and clock.slept[-1] == pytest.approx(0.1)
    # Done at the first read: at once.
    clock = Clock()
    assert poll(lambda: None, lambda status: status is None, 5.0, 0.1, clock, clock.sleep) is None and clock.slept == []


def test_the_benchmarks_gate_is_read_whole_when_it_is_there(monkeypatch, tmp_path):
    """plugins/modules/sglang_wait_file.py: the wrapper's word between two levels (written, then renamed)."""
    gate = host_module("sglang_wait_file", monkeypatch)
    path = tmp_path / "after-16"
    assert gate.read_text(str(path)) is None
    path.write_text("go\n")
    assert gate.read_text(str(path)) == "go\n"
