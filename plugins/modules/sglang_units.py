#!/usr/bin/python
"""Ansible module: this server's layout units on the host, their states and what runs now, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_units
short_description: Find this server's layout units, read their states, and refuse while a swap runs
description:
  - Finds the unit files in unit_dir whose names match pattern and which hold a line matching marker (the
    project's units, of one instance), and reads their states with one systemctl show.
  - With lock_path, says which swap holds the lock (sglang_swap), if any; with fail_if_swapping too, fails
    naming it, before anything changes.
  - With read_running, returns the file of each running unit (what a swap records and rolls back to).
  - With exists, says which of those paths exist (without reading them: they may be secrets).
  - Changes nothing on the host. One connection where find, systemctl show, the swap's probe and two slurps
    took five.
options:
  unit_dir:
    description: Where the units live.
    type: path
    required: true
  pattern:
    description: A regular expression the unit file names match (from their start, as find's use_regex).
    type: str
    required: true
  marker:
    description: A regular expression one line of each unit file matches (from the line's start).
    type: str
    default: ^X-SGLang-Layout=
  read_running:
    description: Return the text of each running unit's file.
    type: bool
    default: false
  lock_path:
    description: The swap lock of this server; when given, the swap that holds it is returned.
    type: path
    default: ""
  fail_if_swapping:
    description: Fail while a swap holds lock_path, naming it.
    type: bool
    default: false
  exists:
    description: Paths to test for existence (never read).
    type: list
    elements: path
    default: []
author: sglang-layouts project
"""

EXAMPLES = r"""
- name: Find this server's units and refuse while a swap runs
  sglang_units:
    unit_dir: /etc/systemd/system
    pattern: ^sglang-[a-z0-9-]+\.service$
    read_running: true
    lock_path: /run/lock/sglang_service.swap.lock
    fail_if_swapping: true
  register: found
"""

RETURN = r"""
units:
  description: The units found, by file name, sorted.
  type: list
  returned: always
states:
  description: "By unit: Id, SubState (running is serving) and UnitFileState (enabled starts at boot)."
  type: dict
  returned: always
running:
  description: The units found whose SubState is running, sorted.
  type: list
  returned: always
files:
  description: By running unit, its file's text (only with read_running).
  type: dict
  returned: always
exists:
  description: By path given in exists, whether it exists.
  type: dict
  returned: always
swap:
  description: >-
    The swap holding lock_path (what its lock file says: unit, previous, began, pid, step), or null; msg says it.
  type: dict
  returned: always
"""

import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_host import refusal, running_swap

STATE_PROPERTIES = "Id,SubState,UnitFileState"


def find_units(unit_dir: str, pattern: str, marker: str) -> list[str]:
    """Regular files (not links) named by `pattern` with a line that `marker` matches, sorted."""
    name_re, marker_re = re.compile(pattern), re.compile(marker)
    try:
        names = os.listdir(unit_dir)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        path = os.path.join(unit_dir, name)
        if not name_re.match(name) or not stat.S_ISREG(os.lstat(path).st_mode):
            continue
        with open(path, errors="replace") as text:
            if any(marker_re.match(line) for line in text):
                found.append(name)
    return sorted(found)


def read_states(shown: str) -> dict[str, dict[str, str]]:
    """`systemctl show --property=... UNIT...`: one block of NAME=VALUE lines per unit, blocks apart by an empty
    line, each keyed by its Id (a block without one is dropped)."""
    states: dict[str, dict[str, str]] = {}
    for block in shown.strip().split("\n\n"):
        properties = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if properties.get("Id"):
            states[properties["Id"]] = properties
    return states


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit_dir": {"type": "path", "required": True},
            "pattern": {"type": "str", "required": True},
            "marker": {"type": "str", "default": "^X-SGLang-Layout="},
            "read_running": {"type": "bool", "default": False},
            "lock_path": {"type": "path", "default": ""},
            "fail_if_swapping": {"type": "bool", "default": False},
            "exists": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,  # it only reads
    )
    p = module.params
    holder = running_swap(p["lock_path"]) if p["lock_path"] else None
    said = refusal(p["lock_path"], holder) if holder is not None else ""
    if said and p["fail_if_swapping"]:
        module.fail_json(msg=said, running=holder)
    try:
        units = find_units(p["unit_dir"], p["pattern"], p["marker"])
    except (OSError, re.error) as exc:
        module.fail_json(msg=f"could not list the units in {p['unit_dir']}: {exc}")
    states: dict[str, dict[str, str]] = {}
    if units:
        rc, out, err = module.run_command(["systemctl", "show", f"--property={STATE_PROPERTIES}", "--", *units])
        if rc != 0:
            module.fail_json(msg=f"systemctl show failed (rc {rc}): {(err or out).strip()[:300]}")
        states = read_states(out)
    running = [name for name in units if states.get(name, {}).get("SubState") == "running"]
    files = {}
    if p["read_running"]:
        for name in running:
            with open(os.path.join(p["unit_dir"], name)) as text:
                files[name] = text.read()
    module.exit_json(
        changed=False,
        units=units,
        states=states,
        running=running,
        files=files,
        exists={path: os.path.lexists(path) for path in p["exists"]},
        swap=holder,
        msg=said,
    )


if __name__ == "__main__":
    main()
