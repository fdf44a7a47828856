"""A rehearsal or a test run stopped by SIGTERM or SIGHUP tears down as after Ctrl-C: boxes destroyed,
local servers and Locust stopped, temp directories removed.

Python's default SIGTERM ends the process at once, skipping every `finally` and context manager that
tears a box down. Here the signal becomes `Stopped`, a KeyboardInterrupt, so pytest and the rehearsal take
their Ctrl-C path. Unlike Ctrl-C at a terminal, which reaches the whole foreground process group, a
`kill` or a time limit reaches one process: `run` passes the stop on to the child it waits for, and
gives the child time to stop in order (subprocess.run would SIGKILL it after a quarter of a second).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
GRACE_S = 120.0  # long enough for an interrupted search to let its swap finish (benchmarks/search/runner.py)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, taken as Ctrl-C; it reached this process alone, not its children."""


def stop_like_ctrl_c(forward_to: Callable[[], Sequence[int]] = tuple) -> None:
    """From now on SIGTERM and SIGHUP raise Stopped in the main thread, once; `forward_to()` names the
    processes that get the same signal first (pytest-xdist's workers, which run the tests)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: object) -> None:
        for other in SIGNALS:  # a second signal must not break the teardown the first one started
            signal.signal(other, signal.SIG_IGN)
        for pid in forward_to():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        raise Stopped(signal.Signals(signum).name)

    for signum in SIGNALS:
        signal.signal(signum, stop)


def run(
    argv: Sequence[str], *, timeout: float | None = None, grace: float = GRACE_S, **popen: Any
) -> subprocess.CompletedProcess:
    """subprocess.run(argv, **popen) with check=False, where an interrupt lets the child stop in order.

    On Stopped the child gets SIGINT (its own Ctrl-C path); on Ctrl-C it already has one. Either way it
    gets `grace` seconds to end before it is killed, and the interrupt goes on.
    """
    with subprocess.Popen(argv, **popen) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        except KeyboardInterrupt as interrupt:
            if isinstance(interrupt, Stopped):
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=grace)
            except BaseException:
                process.kill()
            raise
        except BaseException:
            process.kill()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def die_with_parent() -> None:
    """In a child, before exec: SIGTERM when the process that started it dies (prctl PR_SET_PDEATHSIG), so
    that a test process killed before its teardown (pytest-xdist kills a stopped worker after 10 s) leaves
    no server of its own running (a stand-in, the CUDA repo's web server, a real SGLang)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
