"""Action plugin: run the project's preflight on the controller (a thin adapter over sglang_layout).

It never connects to the host: every fact arrives as an argument, either from
-e values and controller-side files or from what earlier tasks read on the host.
When deploying (the `unit` argument: where this host sits), it also renders the chosen layout's systemd
unit from the same parsed declaration: the name, ExecStart, environment and sandbox the swap writes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

try:
    import sglang_layout  # noqa: F401  (installed into the venv by bin/setup)
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sglang_layout import defaults, nodes, oracle, report
from sglang_layout.command import SECRETS_FILE_IN_UNIT
from sglang_layout.hardening import parse_overrides
from sglang_layout.model_size import ModelConfigError, text_config
from sglang_layout.preflight import Facts, check_all
from sglang_layout.schema import DeclarationError, Layout, select_layout
from sglang_layout.sources import DECLARATION_ARGUMENTS, declaration_from_task, gpu_count, gpu_memory_gib, read_model
from sglang_layout.unit import unit_spec

# Where the deployed unit sits, beyond what preflight already gets (the install record, CUDA home, GPU slice,
# hardening): the root-only secrets file, a multi-node layout's hosts in rank order with this host's name and
# rank 0's address and port, and the instance name (several servers on one machine, sglang_layout.instances).
UNIT_ARGUMENTS: dict[str, dict[str, Any]] = {
    "secrets_source": {"type": "str"},
    "node_hosts": {"type": "list", "elements": "str", "default": []},
    "node_host": {"type": "str", "default": ""},
    "dist_init_address": {"type": "raw"},
    "dist_init_port": {"type": "raw", "default": defaults.DIST_INIT_PORT},
    "instance": {"type": "str", "default": ""},
}

ARGUMENT_SPEC = {
    **DECLARATION_ARGUMENTS,
    "layout": {"type": "str"},
    "gpu_count": {"type": "raw"},
    "gpu_memory_gib": {"type": "raw"},
    "model_config": {"type": "dict"},
    "model_index": {"type": "dict"},
    "model_config_path": {"type": "path"},
    # Whether sglang_api_key is set (the key itself never reaches this plugin).
    "api_key_set": {"type": "bool", "default": False},
    # Refuse a failing layout (true) or only report it (false: the user switched preflight off).
    "enforce": {"type": "bool", "default": True},
    "hardening": {"type": "dict", "default": {}},
    # Whether there is a secrets file (handed to the unit as a credential); its path is the unit's business.
    "secrets": {"type": "bool", "default": False},
    # The host's SGLang install (the sglang_venv record) and CUDA home: with them, the request for SGLang's own
    # checks (oracle_request) is built for the layout (or every layout), to run on the host in the units' sandbox.
    "install": {"type": "dict", "default": {}},
    "cuda_home": {"type": "str", "default": ""},
    "gpu_ids": {"type": "list", "elements": "int", "default": []},
    # The lowest and highest power limit the host's GPUs accept (the GPU record), empty when not recorded.
    "gpu_power_range": {"type": "list", "elements": "float", "default": []},
    # Deploying: render the chosen layout's unit too (returned as `unit`).
    "unit": {"type": "dict", "options": UNIT_ARGUMENTS},
}


def _facts(args: dict, settings: Any, table: Any, config: Any, index: Any, overrides: dict) -> Facts:
    """What the checks know about the host, from the task's arguments (the role read them on the host)."""
    return Facts(
        gpu_count=gpu_count("gpu_count", args["gpu_count"], from_text=True),
        gpu_memory_gib=gpu_memory_gib("gpu_memory_gib", args["gpu_memory_gib"], from_text=True),
        model_config=config,
        model_index=index,
        flag_table=table,
        model_path=settings.model_path,
        port=settings.port,
        host=settings.bind_address,
        api_key_set=args["api_key_set"],
        secrets_file=SECRETS_FILE_IN_UNIT if args["secrets"] else None,
        hardening=overrides,
        gpu_power_range=_power_range(args["gpu_power_range"]),
    )


def _oracle_request(args: dict, asked: list, verdicts: list, overrides: dict) -> dict | None:
    """The request for SGLang's own checks of the asked layouts, when the host's install record says where it is."""
    install = args["install"]
    if not (install.get("venv") and install.get("python_version")):
        return None
    return oracle.request(
        asked,
        {v.layout.name: v.argv for v in verdicts},
        venv=install["venv"],
        python_version=str(install["python_version"]),
        cuda_home=args["cuda_home"] or defaults.CUDA_HOME,
        base_env=install.get("environment") or {},
        gpu_ids=args["gpu_ids"] or None,
        user=install.get("user") or defaults.SERVICE_USER,
        group=install.get("group") or defaults.SERVICE_USER,
        state_dir=install.get("state_dir") or defaults.STATE_DIR,
        hardening_overrides=overrides,
    )


def _unit(args: dict, settings: Any, layout: Layout, overrides: dict) -> dict:
    """The chosen layout's systemd unit (sglang_layout.unit) on this host, from the install record."""
    where, install = args["unit"], args["install"]
    if not install.get("venv"):
        raise DeclarationError("the unit needs the host's SGLang install record (its venv): run playbooks/provision.yml first")
    node = None
    if layout.nnodes > 1:
        address = nodes.dist_init_addr(where["dist_init_address"], where["dist_init_port"])
        node = nodes.place(layout.nnodes, where["node_hosts"], where["node_host"], address)
    return unit_spec(
        layout,
        model_slug=settings.model_slug,
        model_path=settings.model_path,
        port=settings.port,
        host=settings.bind_address,
        venv=install["venv"],
        python_version=str(install.get("python_version") or "3"),
        cuda_home=args["cuda_home"] or defaults.CUDA_HOME,
        base_env={str(k): str(v) for k, v in (install.get("environment") or {}).items()},
        state_dir=install.get("state_dir") or defaults.STATE_DIR,
        user=install.get("user") or defaults.SERVICE_USER,
        group=install.get("group") or defaults.SERVICE_USER,
        hardening_overrides=overrides,
        secrets_source=where["secrets_source"] or None,
        node=node,
        instance=where["instance"],
        gpu_ids=args["gpu_ids"] or None,
    ).to_dict()


def _power_range(given: list[float]) -> tuple[float, float] | None:
    return (float(given[0]), float(given[1])) if len(given) == 2 else None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            settings, layouts, table = declaration_from_task(args)
            # Checked here too, so that a bad override is refused before anything on the host changes.
            overrides = parse_overrides("sglang_service_hardening", args["hardening"])
            chosen = select_layout(layouts, args["layout"]) if args["layout"] is not None else None
            config, index = args["model_config"], args["model_index"]
            if args["model_config_path"]:
                config, index = read_model(Path(args["model_config_path"]))
            facts = _facts(args, settings, table, config, index, overrides)
            verdicts = check_all(layouts, facts)
            asked = [chosen] if chosen is not None else list(layouts.values())
            oracle_request = _oracle_request(args, asked, verdicts, overrides)
        except (DeclarationError, ModelConfigError, ValueError) as exc:
            raise AnsibleActionFail(f"preflight input: {exc}") from exc
        result.update(
            changed=False,
            table=report.format_table(verdicts).splitlines(),
            reasons=report.format_reasons(verdicts).splitlines(),
            verdicts={v.layout.name: v.to_dict() for v in verdicts},
            # What `--layouts auto` needs from the host: its GPUs, and whether the model's attention (MLA)
            # can be split by attention data parallelism (sglang_layout.shapes).
            host_shape={"gpu_count": facts.gpu_count, "attention_dp": bool(config and text_config(config).get("kv_lora_rank"))},
        )
        if oracle_request is not None:
            result["oracle_request"] = oracle_request
        if chosen is None:
            return result
        verdict = next(v for v in verdicts if v.layout.name == chosen.name)
        result["verdict"] = verdict.to_dict()
        if not verdict.ok:
            refusal = f"preflight refused layout {chosen.name}: " + "; ".join(f.text() for f in verdict.errors)
            if args["enforce"]:
                result["failed"] = True
                result["msg"] = refusal
                return result
            self._display.warning(f"{refusal} -- going on because preflight is switched off")
            result["overridden"] = refusal
        if args["unit"] is not None:
            try:
                result["unit"] = _unit(args, settings, chosen, overrides)
            except (DeclarationError, ValueError) as exc:
                raise AnsibleActionFail(f"unit input: {exc}") from exc
        return result
