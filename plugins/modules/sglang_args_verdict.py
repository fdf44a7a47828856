#!/usr/bin/python
"""Ansible module: ask the installed SGLang to judge launch commands, in a transient unit with the layout's sandbox."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_args_verdict
short_description: SGLang's own argument checks on launch commands, without loading a model
description:
  - Runs the given program (roles/sglang_service/files/sglang_args_verdict.py) with the SGLang venv's Python
    as the service user, in a transient systemd unit with the units' sandbox and environment
    (systemd-run --wait --pipe), and returns its JSON report.
  - Every candidate is judged in that one process. Nothing on the host changes; the unit is collected.
options:
  request:
    description: python, user, group, working_directory, environment, properties (sandbox directives) and
      candidates (name, args, env), as sglang_layout.oracle.request builds them.
    type: dict
    required: true
  program:
    description: The program's source text, sent on its standard input.
    type: str
    required: true
  timeout:
    description: Seconds the transient unit may run (RuntimeMaxSec) before it is stopped.
    type: int
    default: 300
author: sglang-layouts project
"""

EXAMPLES = r"""
- name: Ask SGLang
  sglang_args_verdict:
    request: "{{ sglang_service_preflight.oracle }}"
    program: "{{ lookup('ansible.builtin.file', 'sglang_args_verdict.py') }}"
"""

RETURN = r"""
stderr:
  description: systemd-run's and the program's standard error, when no verdict came (what diagnoses it).
  type: str
  returned: failure
report:
  description: The program's report (sglang_version, import_s, total_s, max_rss_mib, cuda_initialised, candidates).
  type: dict
  returned: success
seconds:
  description: Wall time of the transient unit, start to exit.
  type: float
  returned: always
"""

import json
import os
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule


def systemd_run_argv(request: dict, timeout: int, unit: str) -> list[str]:
    argv = [
        "systemd-run",
        f"--unit={unit}",
        "--wait",  # not --quiet: systemd's own lines (e.g. status=226/NAMESPACE) say why a sandbox failed
        "--pipe",
        "--collect",
        "--service-type=exec",
        f"--property=RuntimeMaxSec={timeout}",
        f"--property=User={request['user']}",
        f"--property=Group={request['group']}",
        f"--property=WorkingDirectory={request['working_directory']}",
    ]
    argv += [f"--property={line}" for line in request["properties"]]
    argv += [f"--setenv={key}={value}" for key, value in request["environment"].items()]
    candidates = json.dumps(request["candidates"], separators=(",", ":"))
    return [*argv, "--", request["python"], "-", candidates]


def journal(unit: str, tries: int = 10) -> str:
    """The transient unit's own journal lines (systemd's "Failed at step ...", status=226/NAMESPACE): what says why
    a sandbox could not be set up. journald may write them a moment after systemd-run returns."""
    text = ""
    for _ in range(tries):
        done = subprocess.run(
            ["journalctl", "-u", unit, "--no-pager", "-o", "cat", "-n", "60"], capture_output=True, text=True, check=False
        )
        text = done.stdout
        if "status=" in text:
            break
        time.sleep(0.2)
    return text


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "request": {"type": "dict", "required": True},
            "program": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    request, timeout = module.params["request"], module.params["timeout"]
    unit = f"sglang-args-verdict-{os.getpid()}-{time.time_ns()}.service"
    started = time.monotonic()
    try:
        done = subprocess.run(
            systemd_run_argv(request, timeout, unit),
            input=module.params["program"],
            capture_output=True,
            text=True,
            timeout=timeout + 30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        module.fail_json(msg=f"SGLang's checks did not finish within {timeout} s", seconds=time.monotonic() - started)
    seconds = round(time.monotonic() - started, 3)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        module.fail_json(
            msg=f"SGLang's checks gave no verdict (exit {done.returncode}): {tail or done.stdout[-2000:]}",
            stderr=done.stderr[-8000:] + "\n" + journal(unit),
            seconds=seconds,
        )
    module.exit_json(changed=False, report=report, seconds=seconds)


if __name__ == "__main__":
    main()
