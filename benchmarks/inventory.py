"""The inventory as Ansible reads it (hosts, their variables with group_vars, groups), read once into memory.

ansible-inventory is the one beside this interpreter (a venv's, even when its bin is not on PATH) and runs
without the secrets of this process's environment; nothing is written to disk (ansible-runner's
get_inventory left every variable, secrets too, in a folder of its own under the temp dir).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.endpoint import SECRET_ENVIRONMENT
from benchmarks.sweep import REPO


class InventoryError(Exception):
    """The inventory could not be read, or lacks a host a command names."""


def tool_env() -> dict[str, str]:
    """This process's environment for an Ansible command: without the secrets a child must never inherit."""
    return {
        **{key: value for key, value in os.environ.items() if key not in SECRET_ENVIRONMENT},
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }


def tool(name: str) -> str:
    """An Ansible command: the one beside this interpreter (a venv's, even when its bin is not on PATH), else PATH's."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name) or name


@dataclass(frozen=True)
class Inventory:
    hostvars: dict[str, dict[str, Any]]
    groups: dict[str, list[str]]  # each group's hosts in inventory order (the rank order of a multi-node layout)

    def require(self, hosts: list[str], path: Path, option: str) -> None:
        """Every host named is in the inventory, or InventoryError naming the option, the hosts and the ones there are."""
        missing = [host for host in hosts if host not in self.hostvars]
        if missing:
            raise InventoryError(
                f"{option} {','.join(missing)}: not in the inventory {path}; name one of: {', '.join(self.hostvars) or 'none'}"
            )

    def declaration(self, host: str, path: Path) -> dict[str, Any]:
        """The host's variables as the inventory and its group_vars declare them."""
        self.require([host], path, "host")
        declared = self.hostvars[host]
        if not isinstance(declared.get("sglang_layouts"), dict) or not declared["sglang_layouts"]:
            raise InventoryError(f"host {host!r} has no sglang_layouts declared (group_vars/sglang_servers.yml)")
        return declared


def read_inventory(inventory: Path) -> Inventory:
    """Every host's variables and every group, read once by ansible-inventory into memory: nothing is written
    (ansible-runner's get_inventory left the variables, secrets too, in a folder of its own under the temp dir)."""
    try:
        done = subprocess.run(
            [tool("ansible-inventory"), "-i", str(inventory), "--list"],
            capture_output=True,
            text=True,
            env=tool_env(),
            timeout=120,
            check=False,
        )
        listing = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        raise InventoryError(f"the inventory {inventory} could not be read: {exc}") from exc
    if not isinstance(listing, dict):
        reason = (done.stderr or "").strip().splitlines()[-1:] or [f"ansible-inventory exited {done.returncode}"]
        raise InventoryError(f"the inventory {inventory} could not be read: {reason[0]}")
    hostvars = (listing.get("_meta") or {}).get("hostvars") or {}
    groups = {
        name: list(group.get("hosts") or []) for name, group in listing.items() if isinstance(group, dict) and name != "_meta"
    }
    return Inventory(hostvars, groups)
