"""A swap whose controller dies: killed (SIGKILL) or interrupted (Ctrl-C) at each step, the host finishes it.

The model load takes 8 s here, so each step lasts long enough to be caught: the controller is stopped when
the box shows the step under way, and the box must end with one layout serving, enabled and recorded
(roles/sglang_service/tasks/swap_on_host.yml, plugins/modules/sglang_swap.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.integration.test_deploy import active_fact, deploy, enabled_units, serving_only, state, unit
from tests.rehearsal.gpu_pair import changed_json
from tests.rehearsal.playbook import REPO, ansible_env
from tests.rehearsal.standin import wait_http

LOCK = "/run/lock/sglang_service.swap.lock"
LOAD_S = 8
LONG_LOAD_S = 40  # long enough for a status and a second deploy to run while the host still waits, on a busy CI machine


@contextmanager
def loads_taking(provisioned, seconds: int) -> Iterator[None]:
    with changed_json(provisioned.box.root / "etc" / "sglang-standin.json", load_seconds=seconds):
        yield


@pytest.fixture
def slow_loads(provisioned) -> Iterator[None]:
    with loads_taking(provisioned, LOAD_S):
        yield


@dataclass
class Controller:
    """deploy.yml in its own session, as a terminal runs it: a signal to its group reaches it and its ssh."""

    process: subprocess.Popen
    workers: list[psutil.Process] = field(default_factory=list)

    def stop(self, how: signal.Signals) -> None:
        """The signal to the controller's group, as a terminal sends it. ansible-core's forked workers call
        setsid(), so it misses them: they are noted first, for `controller` to remove at the end."""
        with contextlib.suppress(psutil.Error):
            self.workers = psutil.Process(self.process.pid).children(recursive=True)
        os.killpg(self.process.pid, how)
        self.process.wait(timeout=60)


@contextmanager
def controller(provisioned, layout: str, log: Path, *options: str) -> Iterator[Controller]:
    argv = ["ansible-playbook", "deploy.yml", "-i", str(provisioned.inventory), "-e", f"layout={layout}", *options]
    with open(log, "w") as out:
        running = Controller(subprocess.Popen(argv, cwd=REPO, env=ansible_env(), stdout=out, stderr=out, start_new_session=True))
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.stop(signal.SIGKILL)
        running.process.wait(timeout=30)
        # A worker whose controller was killed blocks for ever on its results pipe: not the test's to leave.
        for worker in running.workers:
            with contextlib.suppress(psutil.Error):
                worker.kill()


def wait_until(condition: Callable[[], bool], seconds: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {seconds} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.25)


def swap_running(box) -> bool:
    """The host-side swap holds its lock: a shared one, as status and sglang_units take, is refused. (An exclusive
    probe would itself pass for a swap to a deploy that looked at that moment.)"""
    return box.run("sudo", "flock", "--shared", "--nonblock", LOCK, "true", check=False).returncode != 0


def healthy(port: int) -> bool:
    return wait_http(f"http://127.0.0.1:{port}/health_generate", 0.5) == 200


def finished_on_the_host(box, log: Path, load_s: int = LOAD_S) -> None:
    wait_until(lambda: not swap_running(box), 3 * load_s + 60, "end of the host's swap", log)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_controller_stopped_as_the_swap_begins_leaves_the_host_to_finish_it(provisioned, slow_loads, tmp_path, how):
    box = provisioned.box
    deploy(provisioned, "ep8").succeeded()
    log = tmp_path / "deploy.log"
    with controller(provisioned, "tp8", log) as deploying:
        wait_until(lambda: swap_running(box), 120, "swap on the host", log)
        deploying.stop(how)
    finished_on_the_host(box, log)
    serving_only(box, provisioned.port, "tp8")
    assert state(box, "ep8") == ("inactive", "disabled")


def test_a_controller_killed_in_the_health_wait_leaves_the_host_to_finish_and_refuses_a_second_swap(provisioned, tmp_path):
    box = provisioned.box
    deploy(provisioned, "ep8").succeeded()
    log = tmp_path / "deploy.log"
    with loads_taking(provisioned, LONG_LOAD_S), controller(provisioned, "tp8", log) as deploying:
        wait_until(lambda: state(box, "tp8")[0] == "active" and not healthy(provisioned.port), 120, "health wait", log)
        deploying.stop(signal.SIGKILL)
    assert swap_running(box)
    status = provisioned.playbook("playbooks/status.yml").succeeded()
    assert "swap: A swap is running on this server now: to sglang-k26-tp8.service" in status.stdout, status.stdout[-2500:]

    second = deploy(provisioned, "ep8")
    assert second.returncode != 0
    assert "A swap is running on this server now: to sglang-k26-tp8.service from sglang-k26-ep8.service" in second.stdout
    assert "at step: wait until sglang-k26-tp8.service generates" in second.stdout, second.stdout[-2000:]

    finished_on_the_host(box, log, LONG_LOAD_S)
    serving_only(box, provisioned.port, "tp8")
    status = provisioned.playbook("playbooks/status.yml").succeeded()
    assert "agreement: the running, enabled and recorded layout agree" in status.stdout
    assert "swap: none running" in status.stdout


def test_a_controller_killed_during_the_rollback_leaves_the_old_layout_serving_enabled_and_recorded(provisioned, tmp_path):
    """tp2ep4 dies in model init (ZeroDivisionError, half-way through its load); the controller dies while tp8
    loads again."""
    box = provisioned.box
    deploy(provisioned, "tp8").succeeded()
    log = tmp_path / "deploy.log"
    with loads_taking(provisioned, 2 * LOAD_S), controller(provisioned, "tp2ep4", log, "-e", "preflight=false") as deploying:
        wait_until(lambda: state(box, "tp2ep4")[0] == "active", 120, "tp2ep4 started", log)
        wait_until(
            lambda: state(box, "tp2ep4")[0] in {"failed", "inactive"} and state(box, "tp8")[0] == "active",
            120,
            "rollback under way",
            log,
        )
        assert not healthy(provisioned.port)  # tp8 is loading again
        deploying.stop(signal.SIGKILL)
    finished_on_the_host(box, log, 2 * LOAD_S)
    serving_only(box, provisioned.port, "tp8")
    assert state(box, "tp2ep4")[1] == "disabled" and enabled_units(box) == [unit("tp8")]
    assert active_fact(box)["command"].startswith("/")
