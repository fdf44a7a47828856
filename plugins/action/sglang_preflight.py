"""Action plugin: run the project's preflight on the controller (a thin adapter over sglang_layout).

It never connects to the host: every fact arrives as an argument, either from
-e values and controller-side files or from what earlier tasks read on the host.
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

from sglang_layout import defaults, flags, report
from sglang_layout.command import SECRETS_FILE_IN_UNIT
from sglang_layout.hardening import parse_overrides
from sglang_layout.model_size import ModelConfigError
from sglang_layout.preflight import Facts, check_all
from sglang_layout.schema import DeclarationError, parse_layouts, select_layout, server_settings
from sglang_layout.sources import flag_table_from_text, gpu_count, gpu_memory_gib, read_flag_table, read_model
from sglang_layout.unit import unit_spec

ARGUMENT_SPEC = {
    "layouts": {"type": "dict", "required": True},
    "common_args": {"type": "dict", "default": {}},
    "common_env": {"type": "dict", "default": {}},
    "layout": {"type": "str"},
    "gpu_count": {"type": "raw"},
    "gpu_memory_gib": {"type": "raw"},
    "model_config": {"type": "dict"},
    "model_index": {"type": "dict"},
    "model_config_path": {"type": "path"},
    "flag_table": {"type": "raw"},
    "flag_table_path": {"type": "path"},
    "model_path": {"type": "raw", "default": defaults.MODEL_PATH},
    "port": {"type": "raw", "default": defaults.PORT},
    "bind_address": {"type": "raw", "default": defaults.BIND_ADDRESS},
    # Whether sglang_api_key is set (the key itself never reaches this plugin).
    "api_key_set": {"type": "bool", "default": False},
    # Refuse a failing layout (true) or only report it (false: the user switched preflight off).
    "enforce": {"type": "bool", "default": True},
    # With these, the chosen layout's unit (name, ExecStart, environment, sandbox) is rendered too.
    "model_slug": {"type": "raw", "default": defaults.MODEL_SLUG},
    "venv": {"type": "str"},
    "python_version": {"type": "str"},
    "cuda_home": {"type": "str"},
    "base_env": {"type": "dict", "default": {}},
    "state_dir": {"type": "str", "default": defaults.STATE_DIR},
    "user": {"type": "str", "default": defaults.SERVICE_USER},
    "group": {"type": "str", "default": defaults.SERVICE_USER},
    "hardening": {"type": "dict", "default": {}},
    # The root-only secrets file on the host, when there are secrets (handed to the unit as a credential).
    "secrets_source": {"type": "str"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            settings = server_settings(
                model_slug=args["model_slug"],
                model_path=args["model_path"],
                port=args["port"],
                bind_address=args["bind_address"],
                from_text=True,
            )
            table = None
            if args["flag_table_path"]:
                table = read_flag_table(Path(args["flag_table_path"]))
            elif isinstance(args["flag_table"], dict):
                table = flags.table_from_json(args["flag_table"])
            elif isinstance(args["flag_table"], str) and args["flag_table"]:
                table = flag_table_from_text(args["flag_table"], "the host's recorded flag table")
            layouts = parse_layouts(
                args["layouts"], common_args=args["common_args"], common_env=args["common_env"], flag_table=table
            )
            hardening = parse_overrides("sglang_service_hardening", args["hardening"])
            chosen = select_layout(layouts, args["layout"]) if args["layout"] is not None else None
            config, index = args["model_config"], args["model_index"]
            if args["model_config_path"]:
                config, index = read_model(Path(args["model_config_path"]))
            facts = Facts(
                gpu_count=gpu_count("gpu_count", args["gpu_count"], from_text=True),
                gpu_memory_gib=gpu_memory_gib("gpu_memory_gib", args["gpu_memory_gib"], from_text=True),
                model_config=config,
                model_index=index,
                flag_table=table,
                model_path=settings.model_path,
                port=settings.port,
                host=settings.bind_address,
                api_key_set=args["api_key_set"],
                secrets_file=SECRETS_FILE_IN_UNIT if args["secrets_source"] else None,
            )
            verdicts = check_all(layouts, facts)
        except (DeclarationError, ModelConfigError, ValueError) as exc:
            raise AnsibleActionFail(f"preflight input: {exc}") from exc
        result.update(
            changed=False,
            table=report.format_table(verdicts).splitlines(),
            reasons=report.format_reasons(verdicts).splitlines(),
            verdicts={v.layout.name: v.to_dict() for v in verdicts},
        )
        if chosen is None:
            return result
        verdict = next(v for v in verdicts if v.layout.name == chosen.name)
        result["verdict"] = verdict.to_dict()
        if not verdict.ok:
            refusal = f"preflight refused layout {chosen.name}: " + "; ".join(f.text() for f in verdict.errors)
            if args["enforce"]:
                result["failed"] = True
                result["msg"] = refusal
                return result  # nothing is rendered for a refused layout
            self._display.warning(f"{refusal} -- going on because preflight is switched off")
            result["overridden"] = refusal
        if args["venv"]:
            try:
                result["unit"] = unit_spec(
                    chosen,
                    model_slug=settings.model_slug,
                    model_path=facts.model_path,
                    port=facts.port,
                    host=facts.host,
                    venv=args["venv"],
                    python_version=args["python_version"] or "3",
                    cuda_home=args["cuda_home"] or defaults.CUDA_HOME,
                    base_env={str(k): str(v) for k, v in args["base_env"].items()},
                    state_dir=args["state_dir"],
                    user=args["user"],
                    group=args["group"],
                    hardening_overrides=hardening,
                    secrets_source=args["secrets_source"] or None,
                ).to_dict()
            except DeclarationError as exc:
                raise AnsibleActionFail(f"preflight input: {exc}") from exc
        return result
