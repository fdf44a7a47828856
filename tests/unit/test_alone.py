"""The turn lock that lets clock-holding tests run alone under pytest-xdist (tests/alone.py)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests import alone

REPO = Path(__file__).resolve().parents[2]


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
    # What each waited is kept for the run's time summary (tests/reports.py): ~0.6 s and ~0.6 s, the first none.
    assert running.waited_s < 0.2 and 0.5 < waiting_alone.waited_s < 3 and 0.5 < later.waited_s < 3


def test_outside_xdist_nothing_locks(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    assert alone.lock() is None
    with alone.exclusive_turn():
        pass


def test_a_turn_handed_to_a_child_lets_its_measurement_in_and_comes_back(tmp_path, monkeypatch):
    """The parent's shared turn would keep its own child's exclusive turn waiting for ever: it is let go while
    the child runs, and taken back after. The child (tests/rehearsal/measured_alone.py) holds the shared turn
    for its deploys and the exclusive one for each measurement only."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the child's lock folder too
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-2")
    alone._lock_of_run.cache_clear()
    parent = alone.lock()
    other_worker = alone.TurnLock("run-2")
    parent.take(exclusive=False)
    other_worker.take(exclusive=False)
    script = (
        "from tests import alone\n"
        "from tests.rehearsal.measured_alone import held_alone\n"
        "alone.lock().take(exclusive=False)\n"
        "print('exclusive' if held_alone(lambda: alone.lock().exclusive)() else 'shared', flush=True)\n"
        "print('exclusive' if alone.lock().exclusive else 'shared after', flush=True)\n"
    )
    with alone.handed_to_child():
        assert parent.held is None
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO)
        time.sleep(1.0)
        assert child.poll() is None  # its measurement waits for the other worker's test to end
        other_worker.release()
        out, _ = child.communicate(timeout=30)
    assert out.split("\n")[:2] == ["exclusive", "shared after"]
    # What a search's process waited is noted for the run's summary, on its worker's line.
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    other_worker.waited_s = 1.5
    alone.note_child_wait(other_worker)
    alone.note_child_wait(other_worker)
    assert alone.children_waits("run-2") == {"gw1": 3.0}
    assert parent.held is not None and not parent.exclusive
    parent.release()
    alone._lock_of_run.cache_clear()
