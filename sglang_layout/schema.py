"""The layout declaration: validate what group_vars says, before anything else looks at it.

Schema (kept stable, inventories are written against it)::

    sglang_layouts:
      <name matching [a-z0-9-]+>:
        tp: int >= 1   (each of tp, ep, pp, dp is 1 when absent)
        ep: int >= 1
        pp: int >= 1
        dp: int >= 1
        args: {flag-name-without-dashes: value | true | false | null}
        env:  {VARIABLE: value}

Common args and environment are merged under each layout's own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

LAYOUT_NAME = re.compile(r"^[a-z0-9-]+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PARALLEL_KEYS = ("tp", "ep", "pp", "dp")
LAYOUT_KEYS = frozenset((*PARALLEL_KEYS, "args", "env", "description"))

# Flags the project renders itself from first-class fields; a layout that also
# sets them in `args` would say two things at once.
RESERVED_ARGS = {
    "tp-size": "tp",
    "tensor-parallel-size": "tp",
    "ep-size": "ep",
    "ep": "ep",
    "expert-parallel-size": "ep",
    "pp-size": "pp",
    "pipeline-parallel-size": "pp",
    "dp-size": "dp",
    "data-parallel-size": "dp",
    "model-path": "sglang_model_path",
    "model": "sglang_model_path",
    "port": "sglang_port",
    "host": "sglang_bind_address",
}

ArgValue = str | int | float | bool | list | None


class DeclarationError(ValueError):
    """A declaration is malformed: names the field, the value and the fix."""

    def __init__(self, field_path: str, value: Any, problem: str, fix: str) -> None:
        self.field_path = field_path
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field_path} = {value!r}: {problem}. Fix: {fix}")


@dataclass(frozen=True)
class Layout:
    """One parallelism layout with common args/env already merged under its own."""

    name: str
    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    args: dict[str, ArgValue] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""

    @property
    def gpus_used(self) -> int:
        return self.dp * self.tp * self.pp

    def arg(self, name: str, default: Any = None) -> Any:
        """The value of a server flag as it will be rendered (None when absent or off)."""
        value = self.args.get(name, default)
        return default if value is None or value is False else value


def _positive_int(path: str, value: Any) -> int:
    # bool is an int subclass in Python: `tp: yes` must not become 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeclarationError(
            path, value, "must be a whole number", f"write it as an integer, e.g. {path.rsplit('.', 1)[-1]}: 8"
        )
    if value < 1:
        raise DeclarationError(path, value, "must be at least 1", "use 1 for 'not split'")
    return value


def _flag_name(path: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise DeclarationError(path, name, "a flag name must be a non-empty string", "write it like mem-fraction-static")
    if name.startswith("-"):
        raise DeclarationError(path, name, "flag names are written without leading dashes", f"write {name.lstrip('-')}")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
        raise DeclarationError(path, name, "is not a flag name", "use letters, digits, '-' and '_' only")
    return name


def _args(path: str, raw: Any, *, reserved_check: bool) -> dict[str, ArgValue]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise DeclarationError(
            path, raw, "must be a mapping of flag name to value", "write e.g. args: {max-running-requests: 256}"
        )
    result: dict[str, ArgValue] = {}
    for name, value in raw.items():
        flag = _flag_name(f"{path}.{name}", name)
        if reserved_check and flag in RESERVED_ARGS:
            owner = RESERVED_ARGS[flag]
            raise DeclarationError(
                f"{path}.{flag}",
                value,
                f"--{flag} is rendered by the project from `{owner}`",
                f"remove it from args and set `{owner}` instead",
            )
        if isinstance(value, Mapping):
            raise DeclarationError(
                f"{path}.{flag}",
                value,
                "a flag value cannot be a mapping",
                "use a string (JSON text if the flag takes JSON), a number, true/false or a list",
            )
        result[flag] = value
    return result


def _env(path: str, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise DeclarationError(path, raw, "must be a mapping of variable name to value", "write e.g. env: {NCCL_ALGO: Ring}")
    result: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise DeclarationError(
                f"{path}.{name}", value, "is not a valid environment variable name", "use [A-Za-z_][A-Za-z0-9_]*"
            )
        if isinstance(value, (Mapping, list)) or value is None:
            raise DeclarationError(f"{path}.{name}", value, "an environment value must be a scalar", "quote it as a string")
        if isinstance(value, bool):
            raise DeclarationError(
                f"{path}.{name}", value, "YAML turned this into a boolean", f'quote it: {name}: "{str(value).lower()}"'
            )
        result[name] = str(value)
    return result


def merge_args(common: Mapping[str, ArgValue], own: Mapping[str, ArgValue]) -> dict[str, ArgValue]:
    """Layout args over common args; an overridden flag keeps its common position."""
    merged = dict(common)
    merged.update(own)
    return merged


def parse_layout(
    name: Any,
    raw: Any,
    *,
    common_args: Mapping[str, ArgValue] | None = None,
    common_env: Mapping[str, str] | None = None,
    path: str = "sglang_layouts",
) -> Layout:
    """Validate one declared layout and merge the common args and env under it."""
    if not isinstance(name, str) or not LAYOUT_NAME.match(name):
        raise DeclarationError(
            f"{path}.{name}",
            name,
            "a layout name must match [a-z0-9-]+ (it becomes part of a systemd unit name)",
            "rename it, e.g. ep8-tuned",
        )
    here = f"{path}.{name}"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise DeclarationError(here, raw, "a layout must be a mapping", "write e.g. {tp: 8, ep: 4}")
    unknown = sorted(set(raw) - LAYOUT_KEYS)
    if unknown:
        raise DeclarationError(
            f"{here}.{unknown[0]}",
            raw[unknown[0]],
            "is not a layout field",
            f"use only {', '.join(sorted(LAYOUT_KEYS))}; server flags go under args",
        )
    sizes = {key: _positive_int(f"{here}.{key}", raw.get(key, 1)) for key in PARALLEL_KEYS}
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise DeclarationError(f"{here}.description", description, "must be text", "quote it")
    return Layout(
        name=name,
        args=merge_args(
            _args("sglang_common_args", common_args, reserved_check=True),
            _args(f"{here}.args", raw.get("args"), reserved_check=True),
        ),
        env={**_env("sglang_common_env", common_env), **_env(f"{here}.env", raw.get("env"))},
        description=description,
        **sizes,
    )


def parse_layouts(
    raw: Any,
    *,
    common_args: Mapping[str, ArgValue] | None = None,
    common_env: Mapping[str, str] | None = None,
) -> dict[str, Layout]:
    """Validate the whole `sglang_layouts` dict, in declaration order."""
    if not isinstance(raw, Mapping) or not raw:
        raise DeclarationError(
            "sglang_layouts",
            raw,
            "must be a non-empty mapping of layout name to layout",
            "declare at least one layout in group_vars, e.g. sglang_layouts: {tp8: {tp: 8}}",
        )
    return {name: parse_layout(name, spec, common_args=common_args, common_env=common_env) for name, spec in raw.items()}


def select_layout(layouts: Mapping[str, Layout], name: Any) -> Layout:
    """The layout the user asked for, or an error listing the declared ones."""
    if name in (None, ""):
        raise DeclarationError("layout", name, "no layout was given", f"pass -e layout=NAME, one of: {', '.join(layouts)}")
    if name not in layouts:
        raise DeclarationError("layout", name, "is not declared in sglang_layouts", f"use one of: {', '.join(layouts)}")
    return layouts[name]
