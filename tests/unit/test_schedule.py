"""The order the run hands modules to its workers (tests/conftest.py): the box modules longest first."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import BOX_MODULE_MINUTES, REPO


def test_every_timed_box_module_is_there():
    """A module renamed or merged away would silently lose its place: its figure must go with it."""
    assert all((REPO / name).is_file() for name in BOX_MODULE_MINUTES)


def test_the_collected_box_modules_come_longest_first():
    """Collected as CI collects them (`--collect-only`, in a child pytest), the timed box modules are handed
    out in descending minutes after the real tier's first module."""
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "tests/integration",
            "tests/real",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout.splitlines()
    order: list[str] = []
    for line in listed:
        module = line.split("::")[0]
        if "::" in line and module not in order:
            order.append(module)
    minutes = [BOX_MODULE_MINUTES[module] for module in order if module in BOX_MODULE_MINUTES]
    assert len(minutes) == len(BOX_MODULE_MINUTES) and minutes == sorted(minutes, reverse=True)
