#!/usr/bin/python
"""Ansible module: read several small files of the host at once (what setup's local facts, stat and slurp give, in
one call)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_read_files
short_description: Read several small files of the host in one call
description:
  - For each named path, whether it exists, its SHA-1 (as stat's checksum) and its content, base64 (as slurp's).
  - A missing file is reported, not an error, unless it is required; a path that exists but cannot be read
    whole (a directory, no permission, too large) fails the module, naming it.
  - Local facts too (JSON records under the facts directory, as setup's C(local) subset reads them), returned
    as C(ansible_local), and files whose paths those records hold.
  - Changes nothing on the host. Preflight reads the project's records, the model's config.json, its safetensors
    index and the installed SGLang's flag table with it, one connection where setup, stat and slurp took six.
options:
  paths:
    description: Files to read, by the name each result is returned under.
    type: dict
    default: {}
  local_facts:
    description: Local facts to read (C(<facts_dir>/<name>.fact), JSON), returned as C(ansible_local); a missing one is left out.
    type: list
    elements: str
    default: []
  facts_dir:
    description: Where the local facts are.
    type: path
    default: /etc/ansible/facts.d
  paths_from_facts:
    description: >-
      Files to read whose path a local fact holds, by name: the keys leading to it, the fact's name first. A
      key that is not there reads nothing (the name is left out of C(files)).
    type: dict
    default: {}
  required:
    description: Names of paths (given, or found in the facts) that must exist (the module fails, naming the missing file).
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
ansible_facts:
  description: C(ansible_local), the local facts read, by name.
  type: dict
  returned: when local_facts is set
files:
  description: >-
    By name: path, exists (bool), and for a file that exists checksum (SHA-1, hex) and content (base64).
  type: dict
  returned: always
"""

import base64
import hashlib
import json
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


def local_facts(directory: str, names: list[str]) -> dict:
    """The named JSON records that exist; ValueError naming a file that is not JSON."""
    found = {}
    for name in names:
        path = os.path.join(directory, f"{name}.fact")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        try:
            found[name] = json.loads(text)
        except ValueError as exc:
            raise ValueError(
                f"the record {path} is not JSON ({exc}). Fix: run playbooks/provision.yml again to rewrite it"
            ) from exc
    return found


def path_in(facts: dict, keys: list) -> str | None:
    """The string the keys lead to in the facts, or None when one is missing."""
    value: object = facts
    for key in keys:
        if not isinstance(value, dict) or str(key) not in value:
            return None
        value = value[str(key)]
    return value if isinstance(value, str) and value else None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "dict", "default": {}},
            "local_facts": {"type": "list", "elements": "str", "default": []},
            "facts_dir": {"type": "path", "default": "/etc/ansible/facts.d"},
            "paths_from_facts": {"type": "dict", "default": {}},
            "required": {"type": "list", "elements": "str", "default": []},
            "max_bytes": {"type": "int", "default": 64 * 1024 * 1024},
        },
        supports_check_mode=True,
    )
    try:
        facts = local_facts(module.params["facts_dir"], module.params["local_facts"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    paths = dict(module.params["paths"])
    for name, keys in module.params["paths_from_facts"].items():
        found = path_in(facts, list(keys))
        if found is not None:
            paths[name] = found
    files = {}
    for name, path in paths.items():
        try:
            files[name] = read(str(path), module.params["max_bytes"])
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"cannot read {path} ({name}): {exc}", files=files)
    asked = [name for name in module.params["required"] if name in paths or name not in module.params["paths_from_facts"]]
    missing = [name for name in asked if not files.get(name, {}).get("exists")]
    if missing:
        where = ", ".join(f"{paths.get(name, '(no path given)')} ({name})" for name in missing)
        module.fail_json(msg=f"missing on the host: {where}", files=files)
    extra = {"ansible_facts": {"ansible_local": facts}} if module.params["local_facts"] else {}
    module.exit_json(changed=False, files=files, **extra)


if __name__ == "__main__":
    main()
