"""The real tier's background install: started only for runs that reach the tier, and stopped whole."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.rehearsal import real_sglang

TIER = Path("/repo/tests/real")

# A stand-in for the prefetch: the handler real_sglang.main() installs, and a child that would outlive it.
PREFETCH_LIKE = """
import signal, subprocess, sys, time
from tests.rehearsal import real_sglang
signal.signal(signal.SIGTERM, real_sglang._end_group)
child = subprocess.Popen(["sleep", "300"])
print(child.pid, flush=True)
time.sleep(300)
"""


def test_only_runs_over_the_whole_tier_prefetch():
    assert real_sglang.among(TIER, [Path("/repo/tests")])
    assert real_sglang.among(TIER, [Path("/repo/tests/unit"), Path("/repo/tests/real")])
    assert real_sglang.among(TIER, [Path("/repo/tests/real/test_real_deploy.py")])
    assert not real_sglang.among(TIER, [Path("/repo/tests/unit"), Path("/repo/tests/integration/test_search.py")])


def _started() -> tuple[subprocess.Popen, int]:
    repo = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-c", PREFETCH_LIKE], stdout=subprocess.PIPE, text=True, start_new_session=True, cwd=repo
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def _gone(pid: int, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    return False


def test_stopping_the_prefetch_stops_what_it_started():
    process, child = _started()
    try:
        real_sglang.stop_prefetch(process)
        assert process.returncode is not None and _gone(child)
    finally:
        process.kill()


def test_a_prefetch_whose_starter_died_takes_its_children_along():
    """PR_SET_PDEATHSIG sends SIGTERM when the test run that started it is killed: the handler ends the group."""
    process, child = _started()
    try:
        os.kill(process.pid, 15)
        process.wait(10)
        assert _gone(child)
    finally:
        process.kill()
