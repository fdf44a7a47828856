"""Ansible workers on this controller left running by a run that was killed (for deploy's warning).

ansible-core's worker processes detach into their own session with /dev/null for stdio
(WorkerProcess._detach). When `ansible-playbook` is SIGKILLed, a worker in the middle of a task
outlives it, re-parented to init or a subreaper, and may still be driving a host. The next deploy
names each one; the box's swap lock (plugins/modules/sglang_swap.py) already keeps two swaps apart.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: sglang_orphan_workers
short_description: Ansible worker processes on the controller whose ansible-playbook is gone
description:
  - Returns one entry per process that looks like an ansible-core worker (its own session, stdout on
    /dev/null, an ansible command line) whose parent is not an Ansible process, excluding this run.
  - Each entry has pid, age_s (seconds since it started) and command (its command line).
"""

RETURN = r"""
_raw:
  description: The orphaned workers, oldest first.
  type: list
  elements: dict
"""


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    sid: int
    command: str
    stdout: str
    age_s: float


def is_ansible(command: str) -> bool:
    return "ansible-playbook" in command or "ansible-runner" in command


def orphaned_workers(processes: list[Process], own: set[int]) -> list[Process]:
    """The detached Ansible workers whose parent is no Ansible process, outside this run's own tree."""
    by_pid = {process.pid: process for process in processes}

    def parent_is_ansible(process: Process) -> bool:
        parent = by_pid.get(process.ppid)
        return parent is not None and is_ansible(parent.command)

    found = [
        process
        for process in processes
        if process.pid not in own
        and is_ansible(process.command)
        and process.sid == process.pid
        and process.stdout == "/dev/null"
        and not parent_is_ansible(process)
    ]
    return sorted(found, key=lambda process: -process.age_s)


def read_process(entry: Path, boot_clock_ticks: float, ticks: int) -> Process | None:
    """One /proc/PID entry, or None when it went away or cannot be read."""
    try:
        stat = (entry / "stat").read_text()
        command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        try:
            stdout = os.readlink(entry / "fd" / "1")
        except OSError:
            stdout = ""
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    started_ticks = int(fields[19])
    return Process(
        pid=int(entry.name),
        ppid=int(fields[1]),
        sid=int(fields[3]),
        command=command,
        stdout=stdout,
        age_s=max(boot_clock_ticks - started_ticks, 0) / ticks,
    )


def process_table(proc: Path = Path("/proc")) -> list[Process]:
    ticks = os.sysconf("SC_CLK_TCK")
    now_ticks = time.clock_gettime(time.CLOCK_BOOTTIME) * ticks
    table = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            process = read_process(entry, now_ticks, ticks)
            if process is not None:
                table.append(process)
    return table


def own_tree(processes: list[Process], pid: int) -> set[int]:
    """This process, its ancestors, and every descendant of its oldest Ansible ancestor (this run)."""
    by_pid = {process.pid: process for process in processes}
    ancestors = [pid]
    while ancestors[-1] in by_pid and by_pid[ancestors[-1]].ppid not in (0, ancestors[-1]):
        ancestors.append(by_pid[ancestors[-1]].ppid)
    roots = [p for p in ancestors if p in by_pid and is_ansible(by_pid[p].command)]
    tree = set(ancestors)
    frontier = set(roots[-1:]) if roots else set()
    while frontier:
        tree |= frontier
        frontier = {process.pid for process in processes if process.ppid in frontier} - tree
    return tree


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        table = process_table()
        return [
            {"pid": process.pid, "age_s": round(process.age_s), "command": process.command[:200]}
            for process in orphaned_workers(table, own_tree(table, os.getpid()))
        ]
