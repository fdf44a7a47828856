#!/usr/bin/python
"""Ansible module: follow a host-side swap (an async job) on the host, and answer the moment it has finished."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_swap_follow
short_description: Wait on the host for an async job (the host-side swap) to finish, for a bounded time
description:
  - Reads the job's status file as ansible.builtin.async_status does, but on the host, every O(interval)
    seconds for up to O(wait) seconds, and returns as soon as the job has finished. A swap is followed in one
    connection per O(wait) seconds instead of one per poll, and its end is seen within O(interval).
  - Returns what async_status returns (the job's own result once it has finished, with C(finished) true), so the
    task is looped until C(result.finished).
  - It only reads. Left behind by a controller that died while following, it ends within O(wait) seconds.
options:
  jid:
    description: The job's id (C(ansible_job_id) of the task started with C(async) and C(poll=0)).
    type: str
    required: true
  async_dir:
    description: Where Ansible's async wrapper writes job status files on the host (C(ansible_async_dir)).
    type: str
    default: ~/.ansible_async
  wait:
    description: Seconds to wait on the host before answering that the job still runs.
    type: float
    default: 5.0
  interval:
    description: Seconds between reads of the status file.
    type: float
    default: 0.1
author: sglang-layouts project
"""

EXAMPLES = r"""
- name: Follow the swap on the host until it has finished
  sglang_swap_follow:
    jid: "{{ job.ansible_job_id }}"
  register: followed
  until: followed.finished
  retries: 720
  delay: 0
"""

RETURN = r"""
finished:
  description: Whether the job has finished; when it has, the job's own result fields come with it.
  type: bool
  returned: always
started:
  description: Always true for a job whose status file exists.
  type: bool
  returned: always
ansible_job_id:
  description: The job's id.
  type: str
  returned: always
"""

import json
import os
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_host import poll


def job_status(path: str) -> dict | None:
    """The job's status as async_status reads it; None when there is no such job."""
    try:
        with open(path) as status:
            text = status.read()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError:  # being written: the job still runs
        return {"started": True, "finished": False}
    if not isinstance(data, dict):
        return {"started": True, "finished": False}
    if "started" in data:  # the wrapper's own note while the job runs
        return {**data, "started": True, "finished": bool(data.get("finished"))}
    return {**data, "started": True, "finished": True}  # the job's result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "jid": {"type": "str", "required": True},
            "async_dir": {"type": "str", "default": "~/.ansible_async"},
            "wait": {"type": "float", "default": 5.0},
            "interval": {"type": "float", "default": 0.1},
        },
        supports_check_mode=True,  # it only reads
    )
    jid = module.params["jid"]
    path = os.path.join(os.path.expanduser(module.params["async_dir"]), jid)
    status = poll(
        lambda: job_status(path), lambda read: read is None or read["finished"], module.params["wait"], module.params["interval"]
    )
    if status is None:
        module.fail_json(msg=f"could not find job {jid} in {path}", ansible_job_id=jid, started=True, finished=True)
    # As async_status answers: the job's own result as the wrapper wrote it (its warnings, invocation and all),
    # which exit_json would take apart again.
    sys.stdout.write("\n" + json.dumps({**status, "ansible_job_id": jid}) + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
