#!/usr/bin/python
"""Ansible module: read several small files of the host at once (what stat and slurp give, in one call)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_read_files
short_description: Read several small files of the host in one call
description:
  - For each named path, whether it exists, its SHA-1 (as stat's checksum) and its content, base64 (as slurp's).
  - A missing file is reported, not an error, unless it is required; a path that exists but cannot be read
    whole (a directory, no permission, too large) fails the module, naming it.
  - Changes nothing on the host. Preflight reads the model's config.json, its safetensors index and the
    installed SGLang's flag table with it, one connection where stat and slurp took five.
options:
  paths:
    description: Files to read, by the name each result is returned under.
    type: dict
    required: true
  required:
    description: Names of paths that must exist (the module fails, naming the missing file).
    type: list
    elements: str
    default: []
  max_bytes:
    description: Refuse a file larger than this (these are JSON records and model configs, not weights).
    type: int
    default: 67108864
author: sglang-layouts project
"""

EXAMPLES = r"""
- name: Read the model's config.json and safetensors index
  sglang_read_files:
    paths:
      config: /srv/models/kimi/config.json
      index: /srv/models/kimi/model.safetensors.index.json
  register: read
"""

RETURN = r"""
files:
  description: >-
    By name: path, exists (bool), and for a file that exists checksum (SHA-1, hex) and content (base64).
  type: dict
  returned: always
"""

import base64
import hashlib
import os

from ansible.module_utils.basic import AnsibleModule


def read(path: str, max_bytes: int) -> dict:
    """One file's record; OSError or ValueError when it exists but cannot be read whole."""
    if not os.path.lexists(path):
        return {"path": path, "exists": False}
    if not os.path.isfile(path):
        raise ValueError("not a regular file")
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    return {"path": path, "exists": True, "checksum": hashlib.sha1(data).hexdigest(), "content": base64.b64encode(data).decode()}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "dict", "required": True},
            "required": {"type": "list", "elements": "str", "default": []},
            "max_bytes": {"type": "int", "default": 64 * 1024 * 1024},
        },
        supports_check_mode=True,
    )
    files = {}
    for name, path in module.params["paths"].items():
        try:
            files[name] = read(str(path), module.params["max_bytes"])
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"cannot read {path} ({name}): {exc}", files=files)
    missing = [name for name in module.params["required"] if not files.get(name, {}).get("exists")]
    if missing:
        where = ", ".join(f"{module.params['paths'].get(name, '(no path given)')} ({name})" for name in missing)
        module.fail_json(msg=f"missing on the host: {where}", files=files)
    module.exit_json(changed=False, files=files)


if __name__ == "__main__":
    main()
