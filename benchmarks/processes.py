"""Stopping everything a run started, when the user interrupts it."""

from __future__ import annotations

import contextlib
import time


def stop_process_tree(grace: float = 3.0) -> None:
    """Stop everything this process started (ansible-playbook, its workers, Locust and its processes)."""
    import psutil

    def running(process: psutil.Process) -> bool:
        try:
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    # Polled, never waited for: ansible-runner reaps its own child, and a second waitpid would confuse it.
    deadline = time.monotonic() + grace
    while any(running(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    for child in children:
        if running(child):
            with contextlib.suppress(psutil.Error):
                child.kill()
