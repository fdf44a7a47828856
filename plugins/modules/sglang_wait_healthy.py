#!/usr/bin/python
"""Ansible module: wait until a layout's unit really generates, or stop waiting the moment it has exited."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_wait_healthy
short_description: Wait for an SGLang unit to answer /health_generate with 200
description:
  - Polls the server's health URL (a real one-token generation) and the unit's state together.
  - Succeeds on HTTP 200 while the unit is active; fails at once when the unit has exited, else at the timeout.
options:
  unit:
    description: The systemd unit running the server.
    type: str
    required: true
  url:
    description: The health URL, e.g. http://127.0.0.1:30001/health_generate.
    type: str
    required: true
  timeout:
    description: Seconds to wait for a healthy answer (model loads can take many minutes).
    type: int
    default: 1800
  interval:
    description: Seconds between polls.
    type: float
    default: 1.0
  restart_after_cgroup_race:
    description:
      - Start the unit once more when its process died while systemd attached it to its control group
        (exit status 219/CGROUP), before the server ran. systemd can lose that race right after the same
        unit stopped (systemd/systemd#12386, #23163); a second start finds the group settled.
    type: bool
    default: false
author: sglang-layouts project
"""

EXAMPLES = r"""
- name: Wait until ep8 generates
  sglang_wait_healthy:
    unit: sglang-k26-ep8.service
    url: http://127.0.0.1:30001/health_generate
    timeout: 1800
"""

RETURN = r"""
outcome:
  description: healthy, exited or timeout.
  type: str
  returned: always
status:
  description: The last HTTP status seen (0 when nothing answered).
  type: int
  returned: always
elapsed:
  description: Seconds waited.
  type: float
  returned: always
load_s:
  description:
    - Seconds from the unit's start (systemd's ExecMainStartTimestampMonotonic) to the healthy answer, the
      model's load time; the wait starts later than the unit, by the start task's own time. Null when unknown.
  type: float
  returned: when healthy
startup:
  description:
    - Seconds from the unit's start to the end of each startup phase SGLang logged in this start's journal
      (weights_loaded, kv_cache_sized, graphs_captured, ready), those it logged.
  type: dict
  returned: when healthy
unit_state:
  description: The unit's ActiveState, SubState, Result and ExecMainStatus when the wait ended.
  type: dict
  returned: always
restarted:
  description: How often the unit was started again after systemd's control-group race (0 or 1).
  type: int
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_host import (
    STARTUP_JOURNAL_LINES,
    HostError,
    http_status,
    journal_argv,
    seconds_since_start,
    startup_phases,
    unhealthy_reason,
    unit_state,
    wait_healthy,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 1800},
            "interval": {"type": "float", "default": 1.0},
            "restart_after_cgroup_race": {"type": "bool", "default": False},
        },
        supports_check_mode=True,  # it only reads, unless a start must be made again
    )
    unit, url, timeout = module.params["unit"], module.params["url"], module.params["timeout"]

    def start_again() -> None:
        module.run_command(["systemctl", "start", unit], check_rc=True)

    retry = module.params["restart_after_cgroup_race"] and not module.check_mode
    started = time.monotonic()
    try:
        outcome, status, state, restarts = wait_healthy(
            lambda: unit_state(module.run_command, unit),
            lambda: http_status(url),
            start_again if retry else None,
            timeout,
            module.params["interval"],
        )
    except HostError as exc:
        module.fail_json(msg=str(exc))
    result = {
        "changed": restarts > 0,
        "outcome": outcome,
        "status": status,
        "elapsed": round(time.monotonic() - started, 1),
        "unit_state": state,
        "restarted": restarts,
    }
    if outcome == "healthy":
        listed = journal_argv(unit, state.get("InvocationID", ""), STARTUP_JOURNAL_LINES, output="short-monotonic")
        phases = startup_phases(module.run_command(listed)[1], state.get("ExecMainStartTimestampMonotonic", ""))
        module.exit_json(load_s=seconds_since_start(state), startup=phases, **result)
    module.fail_json(msg=unhealthy_reason(unit, url, timeout, outcome, status, state), **result)


if __name__ == "__main__":
    main()
