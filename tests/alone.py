"""Tests that hold a clock run alone: the other pytest-xdist workers wait between their tests.

A test marked `alone` holds a figure that is true only on a quiet machine (an open-loop schedule's
burstiness, a queue's TTFT to a few ms); on a two-core machine another worker's playbooks would make
those figures the machine's load. Rates held to what the stand-in sent need no turn, nor does the staged
search, whose figures were measured to hold under load (docs/testing.md).
Every test holds a shared turn while it runs (fixtures included); an `alone` test takes the exclusive turn for its
call (its module fixtures are set up under the shared one) and keeps it while its worker's next test is
`alone` too. A fixture that measures takes it with `exclusive_turn()`. A test whose child process
measures now and then (the SLO search of test_search_capacity.py: deploy, measure...) hands its turn to the child
(`handed_to_child()`), which takes the exclusive turn around each measurement only
(tests/rehearsal/measured_alone.py); its module carries the `alone_inside` mark, and runs among the box
modules, its deploys beside them (tests/conftest.py). A gate lets an exclusive waiter in next, so that the
other worker's stream of short tests cannot starve it. Outside xdist nothing locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

MARK = "alone"


def lock_folder(run_id: str) -> Path:
    """Where one run's workers meet: the controller removes it when the run ends (tests/conftest.py)."""
    return Path(tempfile.gettempdir()) / f"pytest-alone-{run_id}"


def children_waits_file(run_id: str) -> Path:
    """Where a test's child (a search, tests/rehearsal/measured_alone.py) notes what it waited for its turns:
    inside its test's time, which the run's summary would otherwise count as busy (tests/reports.py)."""
    return lock_folder(run_id) / "children-waits"


def note_child_wait(held: TurnLock) -> None:
    """This child process's waits, on its worker's line (the child inherits PYTEST_XDIST_WORKER)."""
    run_id, worker = os.environ.get("PYTEST_XDIST_TESTRUNUID"), os.environ.get("PYTEST_XDIST_WORKER", "main")
    if run_id:
        with contextlib.suppress(OSError), open(children_waits_file(run_id), "a") as out:  # a figure, not a result
            out.write(f"{worker} {held.waited_s:.1f}\n")


def children_waits(run_id: str) -> dict[str, float]:
    """Seconds the workers' children waited for their turns, by worker."""
    waited: dict[str, float] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in children_waits_file(run_id).read_text().splitlines():
            worker, _, seconds = line.partition(" ")
            with contextlib.suppress(ValueError):
                waited[worker] = waited.get(worker, 0.0) + float(seconds)
    return waited


class TurnLock:
    """One worker's hold on the run's turn (two files in a folder named by xdist's run id, shared by its workers)."""

    def __init__(self, run_id: str) -> None:
        folder = lock_folder(run_id)
        folder.mkdir(exist_ok=True)
        self._gate: IO[str] = open(folder / "gate", "a")  # noqa: SIM115  (held for the worker's life)
        self._turn: IO[str] = open(folder / "turn", "a")  # noqa: SIM115
        self.held: int | None = None
        self.waited_s = 0.0  # in all, blocked on the gate or the turn: CI's report says it per worker

    @property
    def exclusive(self) -> bool:
        return self.held == fcntl.LOCK_EX

    def take(self, exclusive: bool) -> None:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if self.held == mode:
            return
        self.release()
        started = time.monotonic()
        fcntl.flock(self._gate, fcntl.LOCK_EX)  # behind an exclusive waiter, who holds the gate meanwhile
        try:
            fcntl.flock(self._turn, mode)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
            self.waited_s += time.monotonic() - started
        self.held = mode

    def release(self) -> None:
        if self.held is not None:
            fcntl.flock(self._turn, fcntl.LOCK_UN)
            self.held = None


def lock() -> TurnLock | None:
    """This worker's lock; None outside xdist (PYTEST_XDIST_TESTRUNUID names the run its workers share)."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return _lock_of_run(run_id) if run_id else None


@functools.cache
def _lock_of_run(run_id: str) -> TurnLock:
    return TurnLock(run_id)


@contextlib.contextmanager
def exclusive_turn() -> Iterator[None]:
    """Within a fixture: the exclusive turn for the block, then the shared one again."""
    held = lock()
    if held is None or held.exclusive:
        yield
        return
    held.take(exclusive=True)
    try:
        yield
    finally:
        held.take(exclusive=False)


@contextlib.contextmanager
def handed_to_child() -> Iterator[None]:
    """Within a test: this worker's turn let go while a child process holds its own (a lock held here would
    keep the child's exclusive turn waiting on its own parent), then taken back as it was."""
    held = lock()
    if held is None or held.held is None:
        yield
        return
    mode = held.held
    held.release()
    try:
        yield
    finally:
        held.take(exclusive=mode == fcntl.LOCK_EX)
