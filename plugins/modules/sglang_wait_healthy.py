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
import urllib.error
import urllib.request
from collections.abc import Callable

from ansible.module_utils.basic import AnsibleModule

EXIT_CGROUP = "219"  # systemd.exec(5), "Process exit codes"
STATE_PROPERTIES = ("ActiveState", "SubState", "Result", "ExecMainStatus", "InvocationID", "ExecMainStartTimestampMonotonic")


def unit_state(module: AnsibleModule, unit: str) -> dict[str, str]:
    argv = ["systemctl", "show", unit] + [f"--property={name}" for name in STATE_PROPERTIES]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def seconds_since_start(state: dict[str, str]) -> float | None:
    """How long ago the unit's main process started, on CLOCK_MONOTONIC (systemd's and time.monotonic's clock)."""
    started_us = state.get("ExecMainStartTimestampMonotonic", "")
    if not started_us.isdigit() or int(started_us) == 0:
        return None
    return round(time.monotonic() - int(started_us) / 1e6, 1)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # an http URL the role composes
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def wait(
    read_state: Callable[[], dict[str, str]],
    read_status: Callable[[], int],
    start_again: Callable[[], None] | None,
    timeout: float,
    interval: float,
) -> tuple[str, int, dict[str, str], int]:
    """Poll until healthy, exited or the timeout: (outcome, last HTTP status, unit state, restarts).

    `start_again`, when given, is used once, for a start systemd itself failed with 219/CGROUP.
    """
    deadline = time.monotonic() + timeout
    status, restarts = 0, 0
    while True:
        state = read_state()
        if state.get("ActiveState") not in ("active", "activating", "reloading"):
            if start_again is not None and restarts == 0 and state.get("ExecMainStatus") == EXIT_CGROUP:
                start_again()
                restarts += 1
                continue
            return "exited", status, state, restarts
        status = read_status()
        if status == 200 and read_state().get("ActiveState") == "active":
            return "healthy", status, state, restarts
        if time.monotonic() >= deadline:
            return "timeout", status, state, restarts
        time.sleep(interval)


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
    unit, url = module.params["unit"], module.params["url"]

    def start_again() -> None:
        module.run_command(["systemctl", "start", unit], check_rc=True)

    retry = module.params["restart_after_cgroup_race"] and not module.check_mode
    started = time.monotonic()
    outcome, status, state, restarts = wait(
        lambda: unit_state(module, unit),
        lambda: http_status(url),
        start_again if retry else None,
        module.params["timeout"],
        module.params["interval"],
    )
    result = {
        "changed": restarts > 0,
        "outcome": outcome,
        "status": status,
        "elapsed": round(time.monotonic() - started, 1),
        "unit_state": state,
        "restarted": restarts,
    }
    if outcome == "healthy":
        module.exit_json(load_s=seconds_since_start(state), **result)
    why = (
        f"{unit} exited ({state.get('Result')}, status {state.get('ExecMainStatus')})"
        if outcome == "exited"
        else f"{unit} did not answer 200 on {url} within {module.params['timeout']} s (last status {status})"
    )
    module.fail_json(msg=why, **result)


if __name__ == "__main__":
    main()
