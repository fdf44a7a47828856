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


def stop_like_ctrl_c() -> None:
    """SIGTERM and SIGHUP (a `kill`, a closed terminal, a CI time limit) take the path Ctrl-C takes.

    The signal is re-sent as SIGINT, so whichever SIGINT handler is in force then (a sweep's, a search's,
    or Python's KeyboardInterrupt) runs its orderly stop. Only the main thread may set handlers.
    """
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def as_interrupt(signum: int, frame: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, as_interrupt)
