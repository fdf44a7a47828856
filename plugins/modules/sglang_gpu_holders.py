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
from ansible.module_utils.sglang_host import GpuHolders, HostError, describe, gpu_indices


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
        wanted = gpu_indices(module.params["gpus"])
    except ValueError:
        module.fail_json(msg=f"gpus must be GPU indices separated by commas, not {module.params['gpus']!r}")
    smi = module.get_bin_path("nvidia-smi")
    result = {"changed": False, "holders": [], "used_mib": 0, "elapsed": 0.0}
    if smi is None:
        module.exit_json(outcome="no-nvidia-smi", **result)
    started = time.monotonic()
    try:
        gpus = GpuHolders(module.run_command, smi, wanted, module.params["foreign_only"])
        if module.params["wait_free"]:
            holders = gpus.wait_free(module.params["timeout"], module.params["interval"])
        else:
            holders = gpus.now()
    except HostError as exc:
        module.fail_json(msg=str(exc), **result)
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
    if holders and module.params["wait_free"]:
        module.fail_json(msg=gpus.still_held(holders, module.params["timeout"]), outcome="timeout", **result)
    module.exit_json(outcome="held" if holders else "free", **result)


if __name__ == "__main__":
    main()
