"""The turn lock that lets clock-holding tests run alone under pytest-xdist (tests/alone.py)."""

from __future__ import annotations

import tempfile
import threading
import time

from tests import alone


def test_an_exclusive_turn_waits_for_the_shared_one_and_goes_before_a_later_shared_one(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # Three holders as three workers would be: each opens the files itself, so their locks conflict.
    running, waiting_alone, later = (alone.TurnLock("run-1") for _ in range(3))
    got: list[str] = []

    def take(lock: alone.TurnLock, exclusive: bool, name: str) -> None:
        lock.take(exclusive)
        got.append(name)

    running.take(exclusive=False)
    first = threading.Thread(target=take, args=(waiting_alone, True, "alone"))
    first.start()
    time.sleep(0.3)  # it waits for the running test, holding the gate
    second = threading.Thread(target=take, args=(later, False, "later"))
    second.start()
    time.sleep(0.3)
    assert got == []  # nobody gets in beside a running test's shared turn but another shared one; the gate holds it
    running.release()
    first.join(timeout=5)
    time.sleep(0.3)
    assert got == ["alone"] and waiting_alone.exclusive  # the later shared turn waits for the exclusive one
    waiting_alone.release()
    second.join(timeout=5)
    assert got == ["alone", "later"] and later.held is not None


def test_outside_xdist_nothing_locks(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    assert alone.lock() is None
    with alone.exclusive_turn():
        pass
