"""Action plugin: render one layout's systemd unit on the controller (a thin adapter over sglang_layout.unit).

Preflight decides whether a layout may run; this only writes down how it runs: the unit's
name, ExecStart, environment and sandbox, from the declaration and the host's install record.
It never connects to the host.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

try:
    import sglang_layout  # noqa: F401  (installed into the venv by bin/setup)
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sglang_layout import defaults, nodes
from sglang_layout.hardening import parse_overrides
from sglang_layout.schema import DeclarationError, select_layout
from sglang_layout.sources import DECLARATION_ARGUMENTS, declaration_from_task
from sglang_layout.unit import unit_spec

ARGUMENT_SPEC = {
    **DECLARATION_ARGUMENTS,
    "layout": {"type": "str", "required": True},
    # From the host's install record (sglang_venv).
    "venv": {"type": "str", "required": True},
    "python_version": {"type": "str"},
    "cuda_home": {"type": "str"},
    "base_env": {"type": "dict", "default": {}},
    "state_dir": {"type": "str", "default": defaults.STATE_DIR},
    "user": {"type": "str", "default": defaults.SERVICE_USER},
    "group": {"type": "str", "default": defaults.SERVICE_USER},
    "hardening": {"type": "dict", "default": {}},
    # The root-only secrets file on the host, when there are secrets (handed to the unit as a credential).
    "secrets_source": {"type": "str"},
    # A multi-node layout: its hosts in rank order, this host's name, rank 0's address and the declared port.
    "node_hosts": {"type": "list", "elements": "str", "default": []},
    "node_host": {"type": "str", "default": ""},
    "dist_init_address": {"type": "raw"},
    "dist_init_port": {"type": "raw", "default": defaults.DIST_INIT_PORT},
    # Several servers on one machine: this one's name and GPU slice (sglang_layout.instances).
    "instance": {"type": "str", "default": ""},
    "gpu_ids": {"type": "list", "elements": "int", "default": []},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            settings, layouts, _ = declaration_from_task(args)
            layout = select_layout(layouts, args["layout"])
            node = None
            if layout.nnodes > 1:
                address = nodes.dist_init_addr(args["dist_init_address"], args["dist_init_port"])
                node = nodes.place(layout.nnodes, args["node_hosts"], args["node_host"], address)
            unit = unit_spec(
                layout,
                model_slug=settings.model_slug,
                model_path=settings.model_path,
                port=settings.port,
                host=settings.bind_address,
                venv=args["venv"],
                python_version=args["python_version"] or "3",
                cuda_home=args["cuda_home"] or defaults.CUDA_HOME,
                base_env={str(k): str(v) for k, v in args["base_env"].items()},
                state_dir=args["state_dir"],
                user=args["user"],
                group=args["group"],
                hardening_overrides=parse_overrides("sglang_service_hardening", args["hardening"]),
                secrets_source=args["secrets_source"] or None,
                node=node,
                instance=args["instance"],
                gpu_ids=args["gpu_ids"] or None,
            )
        except (DeclarationError, ValueError) as exc:
            raise AnsibleActionFail(f"unit input: {exc}") from exc
        result.update(changed=False, unit=unit.to_dict())
        return result
