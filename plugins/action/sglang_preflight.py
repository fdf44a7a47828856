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

from sglang_layout import flags, report
from sglang_layout.preflight import Facts, check_all
from sglang_layout.schema import DeclarationError, parse_layouts, select_layout
from sglang_layout.sources import read_flag_table, read_model
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
    "model_path": {"type": "str", "default": "/models/model"},
    "port": {"type": "int", "default": 30000},
    "bind_address": {"type": "str", "default": "0.0.0.0"},
    # Refuse a failing layout (true) or only report it (false: the user switched preflight off).
    "enforce": {"type": "bool", "default": True},
    # With these, the chosen layout's unit (name, ExecStart, environment) is rendered too.
    "model_slug": {"type": "str"},
    "venv": {"type": "str"},
    "python_version": {"type": "str"},
    "cuda_home": {"type": "str"},
    "base_env": {"type": "dict", "default": {}},
}


def _number(name: str, value: object, kind: type) -> int | float | None:
    if value in (None, ""):
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(
            name, value, f"must be a {'whole ' if kind is int else ''}number", f"pass e.g. -e {name}=8"
        ) from exc
    if number <= 0:
        raise DeclarationError(name, value, "must be positive", f"pass e.g. -e {name}=8")
    return number


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            layouts = parse_layouts(args["layouts"], common_args=args["common_args"], common_env=args["common_env"])
            chosen = select_layout(layouts, args["layout"]) if args["layout"] is not None else None
            config, index = args["model_config"], args["model_index"]
            if args["model_config_path"]:
                config, index = read_model(Path(args["model_config_path"]))
            table = None
            if args["flag_table_path"]:
                table = read_flag_table(Path(args["flag_table_path"]))
            elif isinstance(args["flag_table"], dict):
                table = flags.table_from_json(args["flag_table"])
            elif isinstance(args["flag_table"], str) and args["flag_table"]:
                table = flags.load_table(args["flag_table"])
            facts = Facts(
                gpu_count=_number("gpu_count", args["gpu_count"], int),
                gpu_memory_gib=_number("gpu_memory_gib", args["gpu_memory_gib"], float),
                model_config=config,
                model_index=index,
                flag_table=table,
                model_path=args["model_path"],
                port=args["port"],
                host=args["bind_address"],
            )
        except (DeclarationError, ValueError) as exc:
            raise AnsibleActionFail(f"preflight input: {exc}") from exc
        verdicts = check_all(layouts, facts)
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
        if args["venv"]:
            result["unit"] = unit_spec(
                chosen,
                model_slug=args["model_slug"] or "model",
                model_path=facts.model_path,
                port=facts.port,
                host=facts.host,
                venv=args["venv"],
                python_version=args["python_version"] or "3",
                cuda_home=args["cuda_home"] or "/usr/local/cuda",
                base_env={str(k): str(v) for k, v in args["base_env"].items()},
            ).to_dict()
        if not verdict.ok:
            refusal = f"preflight refused layout {chosen.name}: " + "; ".join(f.text() for f in verdict.errors)
            if args["enforce"]:
                result["failed"] = True
                result["msg"] = refusal
            else:
                self._display.warning(f"{refusal} -- going on because preflight is switched off")
                result["overridden"] = refusal
        return result
