"""Running the project's playbooks from tests and the rehearsal, the way a user does: ansible-playbook."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.rehearsal import stopping
from tests.rehearsal.bench import REPO, tool_env

_RECAP = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", re.MULTILINE)


@dataclass(frozen=True)
class PlaybookRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP counts per host: {'box': {'ok': 12, 'changed': 0, ...}}."""
        recap = self.stdout[self.stdout.rfind("PLAY RECAP") :]
        return {
            host: {key: int(value) for key, value in (pair.split("=") for pair in counts.split())}
            for host, counts in _RECAP.findall(recap)
        }

    def changed(self, host: str) -> int:
        return self.recap[host]["changed"]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def succeeded(self) -> PlaybookRun:
        """Itself when the playbook passed; otherwise an AssertionError carrying the end of its output."""
        if self.returncode != 0:
            raise AssertionError(f"playbook exited {self.returncode}:\n{self.output[-4000:]}")
        return self


def ansible_env() -> dict[str, str]:
    return tool_env(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")


def run_playbook(
    playbook: str,
    inventory: Path,
    extra_vars: dict[str, Any] | None = None,
    *options: str,
    timeout: float = 600,
) -> PlaybookRun:
    """ansible-playbook PLAYBOOK -i INVENTORY -e JSON OPTIONS..., from the repository root."""
    argv = ["ansible-playbook", playbook, "-i", str(inventory)]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    done = stopping.run(
        [*argv, *options], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ansible_env(), timeout=timeout
    )
    return PlaybookRun(done.returncode, done.stdout, done.stderr)


def write_inventory(box: Any, directory: Path, **host_vars: object) -> Path:
    """An inventory for one rehearsal box that sees the project's group_vars (as inventory/ does).

    Test settings go in as host vars: they beat group_vars, as a user's host_vars would.
    """
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "group_vars"
    if not link.exists():
        link.symlink_to(REPO / "group_vars")
    return box.write_inventory(directory / "hosts.yml", host_vars=host_vars)
