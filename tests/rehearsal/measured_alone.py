"""`python -m tests.rehearsal.measured_alone ARGS`: `python -m benchmarks ARGS`, with each measurement of a
search under the test run's exclusive turn (tests/alone.py), and its deploys under the shared one.

A search deploys and measures candidate after candidate; only the measurement is held to the stand-in's
clock, so only it keeps the other pytest-xdist worker waiting (a search once held the turn for 4.3 min, of
which its deploys were about half). The test hands its own turn over while this runs
(`alone.handed_to_child()`). The search itself is untouched: its `measure_levels` is wrapped here, in
this process only. Meant for one host at a time (the lock is this process's).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tests import alone


def held_alone(measure: Callable[..., Any]) -> Callable[..., Any]:
    """`measure`, called under the exclusive turn."""

    def measured(*args: Any, **kwargs: Any) -> Any:
        with alone.exclusive_turn():
            return measure(*args, **kwargs)

    return measured


def main() -> int:
    from benchmarks.cli import main as benchmarks_main
    from benchmarks.processes import stop_like_ctrl_c
    from benchmarks.search import runner

    runner.measure_levels = held_alone(runner.measure_levels)
    held = alone.lock()
    if held is None:
        stop_like_ctrl_c()
        return benchmarks_main()
    held.take(exclusive=False)
    stop_like_ctrl_c()
    try:
        return benchmarks_main()
    finally:
        alone.note_child_wait(held)


if __name__ == "__main__":
    sys.exit(main())
