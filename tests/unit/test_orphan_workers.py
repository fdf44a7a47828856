"""Which processes deploy names as Ansible workers left by a killed run (plugins/lookup/sglang_orphan_workers.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "lookup" / "sglang_orphan_workers.py"
PLAYBOOK = "/venv/bin/python /venv/bin/ansible-playbook deploy.yml -e layout=ep8"


def lookup():
    spec = importlib.util.spec_from_file_location("sglang_orphan_workers", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def table(*rows: tuple[int, int, int, str, str]) -> list:
    process = lookup().Process
    return [process(pid, ppid, sid, command, stdout, age_s=float(100 - pid)) for pid, ppid, sid, command, stdout in rows]


def test_a_detached_worker_whose_playbook_is_gone_is_named_and_a_live_runs_are_not():
    plugin = lookup()
    processes = table(
        (1, 0, 1, "/sbin/init", "/dev/null"),
        (10, 1, 10, "-bash", "/dev/pts/0"),
        (20, 10, 10, PLAYBOOK, "/dev/pts/0"),  # a live run: its main process...
        (21, 20, 21, PLAYBOOK, "/dev/null"),  # ...and its worker
        (30, 1, 30, PLAYBOOK, "/dev/null"),  # a worker whose main process was killed
        (31, 1, 31, PLAYBOOK, "/dev/pts/1"),  # `setsid ansible-playbook` whose shell left: not detached stdio
        (40, 1, 40, "/usr/bin/python3 worker.py", "/dev/null"),  # not Ansible
    )
    assert [process.pid for process in plugin.orphaned_workers(processes, own=set())] == [30]


def test_this_runs_own_workers_are_never_named_even_when_its_main_process_was_reparented():
    plugin = lookup()
    processes = table(
        (1, 0, 1, "/sbin/init", "/dev/null"),
        (50, 1, 9, PLAYBOOK, "/dev/null"),  # this run, started under nohup: its parent is init
        (51, 50, 51, PLAYBOOK, "/dev/null"),  # this run's worker, which asks
        (52, 50, 52, PLAYBOOK, "/dev/null"),
        (60, 1, 60, PLAYBOOK, "/dev/null"),  # a killed run's worker
    )
    own = plugin.own_tree(processes, 51)
    assert {50, 51, 52} <= own and 60 not in own
    assert [process.pid for process in plugin.orphaned_workers(processes, own)] == [60]


def test_the_oldest_is_named_first():
    plugin = lookup()
    processes = table((70, 1, 70, PLAYBOOK, "/dev/null"), (65, 1, 65, PLAYBOOK, "/dev/null"))
    assert [process.pid for process in plugin.orphaned_workers(processes, own=set())] == [65, 70]
