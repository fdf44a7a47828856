"""A SIGKILLed ansible-playbook leaves its worker running on the controller: the next deploy names it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from tests.rehearsal.playbook import REPO, ansible_env, run_playbook

SLEEPER = """\
- name: A task that outlives its controller
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Sleep
      ansible.builtin.command: sleep 120
      changed_when: false
"""


def detached_workers(main: psutil.Process) -> list[psutil.Process]:
    """The main process's children in a session of their own (ansible-core's workers)."""
    found = []
    for child in main.children():
        try:
            if os.getsid(child.pid) == child.pid:
                found.append(child)
        except ProcessLookupError:
            pass
    return found


@pytest.fixture
def killed_run_worker(tmp_path):
    """An ansible-playbook SIGKILLed while its worker runs a task: the worker, alive, re-parented."""
    playbook = tmp_path / "sleeper.yml"
    playbook.write_text(SLEEPER)
    local = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]
    argv = ["ansible-playbook", *local, str(playbook)]
    main = subprocess.Popen(argv, cwd=REPO, env=ansible_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    workers: list[psutil.Process] = []
    while not workers and time.monotonic() < deadline:
        time.sleep(0.2)
        workers = detached_workers(psutil.Process(main.pid))
    assert workers, "the playbook's worker never started"
    (worker,) = workers
    main.kill()
    main.wait()
    try:
        yield worker
    finally:
        try:
            leftovers = [worker, *worker.children(recursive=True)]
        except psutil.NoSuchProcess:
            leftovers = []
        for process in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def test_the_next_deploy_names_the_worker_a_killed_run_left(killed_run_worker, tmp_path):
    assert killed_run_worker.is_running() and killed_run_worker.ppid() != 0
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"sglang_servers": {"hosts": {"nowhere": {"ansible_connection": "local"}}}}))
    done = run_playbook("deploy.yml", inventory, None, "-e", "layout=no-such-layout", timeout=300)
    named = [line for line in done.stdout.splitlines() if f"process {killed_run_worker.pid} on this controller" in line]
    assert named and f"kill {killed_run_worker.pid}" in done.stdout, done.stdout[-3000:]
    assert done.stdout.count("is a worker of an ansible-playbook that is gone") == 1  # this run's own workers are not named
    killed_run_worker.kill()
    killed_run_worker.wait(10)
    quiet = run_playbook("deploy.yml", inventory, None, "-e", "layout=no-such-layout", timeout=300)
    assert "is a worker of an ansible-playbook that is gone" not in quiet.stdout
