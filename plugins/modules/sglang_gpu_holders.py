#!/usr/bin/python
"""Ansible module: which processes hold a layout's GPUs, and (optionally) wait until none does."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_gpu_holders
short_description: List the compute processes on given GPUs; optionally wait until the GPUs are free
description:
  - Asks nvidia-smi which compute processes run on the given GPU indices and how much memory they hold.
  - With wait_free, polls until no process holds them and fails at the timeout, naming the holders.
  - Without nvidia-smi on the host it reports that and succeeds (a CPU box has no GPU to free).
options:
  gpus:
    description: GPU indices, comma-separated (the unit's CUDA_VISIBLE_DEVICES).
    type: str
    required: true
  wait_free:
    description: Wait until no compute process holds these GPUs (else only report).
    type: bool
    default: false
  foreign_only:
    description: Only count processes outside the given systemd units (read from /proc/PID/cgroup).
    type: list
    elements: str
    default: []
  fail_if_held:
    description: Fail at once (no wait) when a counted process holds the GPUs.
    type: bool
    default: false
  timeout:
    description: Seconds to wait for the GPUs to be free.
    type: int
    default: 120
  interval:
    description: Seconds between polls.
    type: float
    default: 1.0
author: sglang-layouts project
"""

EXAMPLES = r"""
- name: Wait until nothing holds GPUs 0-7
  sglang_gpu_holders:
    gpus: "0,1,2,3,4,5,6,7"
    wait_free: true
    timeout: 120
"""

RETURN = r"""
outcome:
  description: free, held (only reported), timeout, or no-nvidia-smi.
  type: str
  returned: always
holders:
  description: The processes on those GPUs when the module ended (gpu index, pid, name, used MiB).
  type: list
  returned: always
used_mib:
  description: GPU memory held on those GPUs, in MiB.
  type: int
  returned: always
elapsed:
  description: Seconds waited.
  type: float
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule

BUS_QUERY = ["--query-gpu=index,pci.bus_id", "--format=csv,noheader"]
APPS_QUERY = ["--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv,noheader,nounits"]


def parse_bus_ids(text: str) -> dict[str, int]:
    """`0, 00000000:01:00.0` lines -> {bus id (upper case): index}."""
    found = {}
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            found[parts[1].upper()] = int(parts[0])
    return found


def parse_holders(text: str, bus_ids: dict[str, int], wanted: set[int]) -> list[dict]:
    """Compute-app lines on the wanted GPUs -> [{gpu, pid, name, used_mib}]."""
    holders = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 4 or not parts[1].isdigit():
            continue
        gpu = bus_ids.get(parts[0].upper())
        if gpu is None or gpu not in wanted:
            continue
        used = int(parts[3]) if parts[3].isdigit() else 0
        holders.append({"gpu": gpu, "pid": int(parts[1]), "name": parts[2], "used_mib": used})
    return holders


def unit_of(pid: int) -> str:
    """The systemd service whose cgroup the process runs in ('' when none or unreadable)."""
    try:
        with open(f"/proc/{pid}/cgroup") as handle:
            groups = handle.read()
    except OSError:
        return ""
    # The innermost service counts (a container's own unit may enclose it).
    services = [part for line in groups.splitlines() for part in line.split("/") if part.endswith(".service")]
    return services[-1] if services else ""


def describe(holders: list[dict]) -> str:
    by_pid: dict[int, dict] = {}
    for holder in holders:
        entry = by_pid.setdefault(holder["pid"], {"name": holder["name"], "gpus": [], "mib": 0})
        entry["gpus"].append(holder["gpu"])
        entry["mib"] += holder["used_mib"]
    return "; ".join(
        f"pid {pid} ({item['name']}{', unit ' + unit_of(pid) if unit_of(pid) else ''})"
        f" on GPU {','.join(map(str, sorted(item['gpus'])))} holding {item['mib']} MiB"
        for pid, item in sorted(by_pid.items())
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "str", "required": True},
            "wait_free": {"type": "bool", "default": False},
            "foreign_only": {"type": "list", "elements": "str", "default": []},
            "fail_if_held": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 120},
            "interval": {"type": "float", "default": 1.0},
        },
        supports_check_mode=True,  # it only reads
    )
    try:
        wanted = {int(part) for part in module.params["gpus"].split(",") if part.strip()}
    except ValueError:
        module.fail_json(msg=f"gpus must be GPU indices separated by commas, not {module.params['gpus']!r}")
    smi = module.get_bin_path("nvidia-smi")
    result = {"changed": False, "holders": [], "used_mib": 0, "elapsed": 0.0}
    if smi is None:
        module.exit_json(outcome="no-nvidia-smi", **result)
    started = time.monotonic()
    deadline = started + module.params["timeout"]

    def ask(query: list[str]) -> str:
        rc, out, err = module.run_command([smi, *query])
        if rc != 0:
            module.fail_json(msg=f"nvidia-smi {' '.join(query)} failed (rc {rc}): {(err or out).strip()[:300]}", **result)
        return out

    bus_ids = parse_bus_ids(ask(BUS_QUERY))
    while True:
        holders = parse_holders(ask(APPS_QUERY), bus_ids, wanted)
        if module.params["foreign_only"]:
            holders = [h for h in holders if unit_of(h["pid"]) not in module.params["foreign_only"]]
        result.update(holders=holders, used_mib=sum(h["used_mib"] for h in holders), elapsed=round(time.monotonic() - started, 1))
        if holders and module.params["fail_if_held"]:
            module.fail_json(
                msg=(
                    f"GPU {','.join(map(str, sorted(wanted)))} are in use by {describe(holders)}, outside this server's "
                    "units. Stop those processes (a server started by hand, or a layout of another instance or of the "
                    "whole machine on these GPUs: playbooks/stop.yml -e target=ITS_HOST) and deploy again; nothing was changed."
                ),
                outcome="held",
                **result,
            )
        if not module.params["wait_free"]:
            module.exit_json(outcome="held" if holders else "free", **result)
        if not holders:
            module.exit_json(outcome="free", **result)
        if time.monotonic() >= deadline:
            break
        time.sleep(module.params["interval"])
    module.fail_json(
        msg=(
            f"GPU {','.join(map(str, sorted(wanted)))} still held after {module.params['timeout']} s by {describe(holders)}. "
            "Stop those processes (a server started by hand?) or raise sglang_service_gpu_free_timeout; "
            "the new layout was not started, since it would run out of memory loading."
        ),
        outcome="timeout",
        **result,
    )


if __name__ == "__main__":
    main()
