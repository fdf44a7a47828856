#!/usr/bin/python
"""Ansible module: wait for a file to appear and answer with its content (a caller's word between two steps)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_wait_file
short_description: Wait until a file exists and return what it says
description:
  - Looks for the file every O(interval) seconds (ansible.builtin.wait_for looks once a second at the least) and
    returns its content, stripped, as soon as it is there. Fails at O(timeout).
  - The benchmark playbook waits with it for the wrapper's word (go or stop) on the level before; the wrapper writes
    the file whole (written under another name, then renamed), so a file that exists is complete.
options:
  path:
    description: The file to wait for.
    type: path
    required: true
  timeout:
    description: Seconds to wait before failing.
    type: float
    default: 600
  interval:
    description: Seconds between looks.
    type: float
    default: 0.05
author: sglang-layouts project
"""

EXAMPLES = r"""
- name: Wait for the caller's word on level 16
  sglang_wait_file:
    path: /tmp/gate/after-16
  register: word
"""

RETURN = r"""
content:
  description: The file's content, without surrounding whitespace.
  type: str
  returned: success
waited_s:
  description: Seconds waited.
  type: float
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_host import poll


def read_text(path: str) -> str | None:
    try:
        with open(path) as found:
            return found.read()
    except FileNotFoundError:
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "timeout": {"type": "float", "default": 600},
            "interval": {"type": "float", "default": 0.05},
        },
        supports_check_mode=True,  # it only reads
    )
    path, started = module.params["path"], time.monotonic()
    content = poll(lambda: read_text(path), lambda read: read is not None, module.params["timeout"], module.params["interval"])
    waited = round(time.monotonic() - started, 2)
    if content is None:
        module.fail_json(msg=f"{path} did not appear within {module.params['timeout']:g} s", waited_s=waited)
    module.exit_json(changed=False, content=content.strip(), waited_s=waited)


if __name__ == "__main__":
    main()
