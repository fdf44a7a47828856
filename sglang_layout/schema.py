"""The layout declaration: validate what group_vars says, before anything else looks at it.

Schema (kept stable, inventories are written against it)::

    sglang_layouts:
      <name matching [a-z0-9][a-z0-9-]*, at most 48 characters>:
        description: one line of text (a multi-line one is folded, with a warning)
        tp: int >= 1   (each of tp, ep, pp, dp is 1 when absent; dp x tp x pp <= 4096)
        ep: int >= 1
        pp: int >= 1
        dp: int >= 1
        args: {flag-name-without-dashes: value | [values] | true | false | null}
        env:  {VARIABLE: value}
        hardening: {SystemdDirective: value | null}   (see sglang_layout.hardening)
        nnodes: int >= 1   (1 when absent: one box; more spans boxes with SGLang's own multi-node launch)
        draft: a speculative draft declared in sglang_draft_models (sglang_layout.drafts)
        nodes: inventory group whose hosts, in inventory order, are node ranks 0..nnodes-1 (needed when nnodes > 1)

Common args and environment are merged under each layout's own. Every string that
reaches the unit file or the command line is checked whole (sglang_layout.text):
no control characters, bounded, and no flag smuggled in a value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_layout import defaults, envrules, flags, hardening, reserved, text
from sglang_layout.drafts import DRAFT_FLAGS, Draft
from sglang_layout.errors import DeclarationError

__all__ = [
    "DeclarationError",
    "Layout",
    "ServerSettings",
    "parse_layout",
    "parse_layouts",
    "parse_span",
    "select_layout",
    "server_settings",
]

LAYOUT_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
MODEL_SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FLAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
NUMBER = re.compile(r"-[0-9][0-9.eE+-]*")
PARALLEL_KEYS = ("tp", "ep", "pp", "dp")
LAYOUT_KEYS = frozenset((*PARALLEL_KEYS, "args", "env", "description", "hardening", "nnodes", "nodes", "draft", "power_limit"))
# A GPU power limit in whole watts (nvidia-smi -pl); the host's own range is checked by preflight.
MAX_POWER_LIMIT_W = 5000
GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what Ansible accepts as a group name
MAX_WIDTH = 1024  # per parallel size
MAX_GPUS = 4096  # dp x tp x pp: bounds what is rendered (CUDA_VISIBLE_DEVICES) before any verdict
MAX_ARGS = 256
# Server flags whose values the rules read: they must be numbers of the right kind and range.
NUMERIC_ARGS: dict[str, tuple[type, float, float, float]] = {
    "mem-fraction-static": (float, 0.0, 1.0, 0.88),
    "moe-dp-size": (int, 1, MAX_WIDTH, 1),
    "attn-dp-size": (int, 1, MAX_WIDTH, 1),
    "moe-dense-tp-size": (int, 1, MAX_WIDTH, 1),
    "context-length": (int, 1, 100_000_000, 32768),
    "max-running-requests": (int, 1, 10_000_000, 256),
}

ArgValue = str | int | float | bool | list | None


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
    hardening: dict[str, hardening.HardeningValue | None] = field(default_factory=dict)
    notices: tuple[str, ...] = ()  # what parsing changed and says so (a folded description)
    nnodes: int = 1
    nodes: str = ""  # the inventory group whose hosts are the node ranks, in inventory order
    draft: str = ""  # the speculative draft model it names (sglang_layout.drafts); its flags are in args
    power_limit: int | None = None  # watts per GPU, set when its unit starts and put back when it stops

    @property
    def gpus_used(self) -> int:
        """GPUs across every node: dp x tp x pp."""
        return self.dp * self.tp * self.pp

    @property
    def gpus_per_node(self) -> int:
        """GPUs each node gives the layout (the rules require nnodes to divide tp x pp)."""
        return max(1, self.gpus_used // self.nnodes)

    def arg(self, name: str, default: Any = None) -> Any:
        """The value of a server flag as it will be rendered (None when absent or off)."""
        value = self.args.get(name, default)
        return default if value is None or value is False else value


@dataclass(frozen=True)
class ServerSettings:
    """The declaration's server-wide strings and numbers, checked."""

    model_slug: str = defaults.MODEL_SLUG
    model_path: str = defaults.MODEL_PATH
    port: int = defaults.PORT
    bind_address: str = defaults.BIND_ADDRESS


def server_settings(
    *,
    model_slug: Any = defaults.MODEL_SLUG,
    model_path: Any = defaults.MODEL_PATH,
    port: Any = defaults.PORT,
    bind_address: Any = defaults.BIND_ADDRESS,
    from_text: bool = False,
) -> ServerSettings:
    """Check what names the units and reaches every command line: slug, model path, port, bind address.

    `from_text`: values templated by Ansible arrive as text, so a port of digits is a port.
    """
    return ServerSettings(
        model_slug=text.matching(
            "sglang_model_slug",
            model_slug,
            MODEL_SLUG,
            max_length=32,
            what="a short name of [a-z0-9-] (it names the units, sglang-<slug>-<layout>.service)",
            fix="write e.g. k26",
        ),
        model_path=text.absolute_path("sglang_model_path", model_path, example="/srv/models/Kimi-K2.6"),
        port=text.whole_number("sglang_port", port, low=1, high=65535, example=30001, from_text=from_text),
        bind_address=text.bind_address("sglang_bind_address", bind_address),
    )


def _positive_int(path: str, value: Any) -> int:
    return text.whole_number(path, value, low=1, high=MAX_WIDTH, example=8)


def _flag_name(path: str, name: Any) -> str:
    if isinstance(name, str) and name.startswith("-"):
        raise text.refuse(path, name, "flag names are written without leading dashes", f"write {name.lstrip('-')}")
    return text.matching(
        path,
        name,
        FLAG_NAME,
        max_length=100,
        what="a flag name",
        fix="use letters, digits, '-' and '_' only, e.g. mem-fraction-static",
    )


def _word(path: str, value: Any) -> None:
    """One word of a flag's value: text that cannot be taken for another flag."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise text.refuse(path, value, "is not a finite number", "write a number")
    if isinstance(value, (int, float)):
        return
    if not isinstance(value, str):
        raise text.refuse(path, value, "a flag value must be text, a number or true/false", "quote it as a string")
    text.plain_text(path, value, fix="write the value on one line")
    if value.startswith("-") and not NUMBER.fullmatch(value):
        raise text.refuse(
            path,
            value,
            "starts with '-': argparse would read it as another flag, not as this flag's value",
            "remove the leading '-' (flags are declared as args keys, never inside values)",
        )


def _value(path: str, name: str, value: Any) -> ArgValue:
    if isinstance(value, Mapping):
        raise text.refuse(
            path,
            value,
            "a flag value cannot be a mapping",
            "use a string (JSON text if the flag takes JSON), a number, true/false or a list",
        )
    if isinstance(value, list):
        if len(value) > MAX_ARGS:
            raise text.refuse(path, f"{len(value)} items", f"a list value holds at most {MAX_ARGS} items", "shorten it")
        for index, item in enumerate(value):
            if isinstance(item, (Mapping, list)) or item is None or isinstance(item, bool):
                raise text.refuse(f"{path}[{index}]", item, "a list item must be text or a number", "write it as a string")
            _word(f"{path}[{index}]", item)
        return value
    _word(path, value)
    if name in NUMERIC_ARGS and value is not None and value is not False:
        kind, low, high, example = NUMERIC_ARGS[name]
        if kind is int:
            text.whole_number(path, value, low=int(low), high=int(high), example=int(example), from_text=True)
        else:
            text.real_number(path, value, low=low, high=high, example=example, from_text=True)
    return value


def _args(path: str, raw: Any, table: flags.FlagTable | None) -> dict[str, ArgValue]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise text.refuse(path, raw, "must be a mapping of flag name to value", "write e.g. args: {max-running-requests: 256}")
    if len(raw) > MAX_ARGS:
        raise text.refuse(path, f"{len(raw)} flags", f"at most {MAX_ARGS} flags", "remove some")
    result: dict[str, ArgValue] = {}
    for name, value in raw.items():
        flag = _flag_name(f"{path}.{name}", name)
        meaning = reserved.reserved_meaning(flag, table)
        if meaning is not None:
            owner = reserved.RESERVED[meaning]
            spelled = "" if flag == meaning else f" (argparse reads --{flag} as --{meaning})"
            raise text.refuse(
                f"{path}.{flag}",
                "<hidden>" if meaning in reserved.SECRET_FLAGS else value,
                f"--{meaning} is rendered by the project" + (f" from `{owner}`" if owner else "") + spelled,
                reserved.fix_for(meaning),
            )
        result[flag] = _value(f"{path}.{flag}", flag, value)
    _refuse_twice_given(path, list(result), table)
    return result


def _refuse_twice_given(path: str, names: list[str], table: flags.FlagTable | None) -> None:
    """Two names of one flag (an alias, or an abbreviation argparse expands: max-running-request beside
    max-running-requests) would reach the server as one flag given twice, the last one winning silently.
    Only the installed SGLang's table can tell (without it, preflight on the host checks the command line)."""
    if table is None:
        return
    seen: dict[str, str] = {}
    for name in names:
        spec, _ = flags.resolve(table, f"--{name}")
        canonical = spec.canonical.removeprefix("--") if spec else name
        if canonical in seen:
            raise text.refuse(
                f"{path}.{name}",
                name,
                f"argparse reads --{seen[canonical]} and --{name} as one flag, --{canonical}",
                "give the flag once, by its full name",
            )
        seen[canonical] = name


def _env(path: str, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise text.refuse(path, raw, "must be a mapping of variable name to value", "write e.g. env: {NCCL_ALGO: Ring}")
    result: dict[str, str] = {}
    for name, value in raw.items():
        here = f"{path}.{name}"
        text.matching(
            here, name, ENV_NAME, max_length=128, what="a valid environment variable name", fix="use [A-Za-z_][A-Za-z0-9_]*"
        )
        if refused := envrules.refusal(name):
            raise text.refuse(here, value, *refused)
        if isinstance(value, (Mapping, list)) or value is None:
            raise text.refuse(here, value, "an environment value must be a scalar", "quote it as a string")
        if isinstance(value, bool):
            raise text.refuse(here, value, "YAML turned this into a boolean", f'quote it: {name}: "{str(value).lower()}"')
        if isinstance(value, float) and not math.isfinite(value):
            raise text.refuse(here, value, "is not a finite number", "quote it as a string")
        result[name] = text.plain_text(here, str(value), fix="write the value on one line")
    return result


def _description(path: str, raw: Any) -> tuple[str, tuple[str, ...]]:
    if raw is None:
        return "", ()
    description, folded = text.one_line(path, raw)
    notice = f"{path} was folded to one line (a unit comment holds one line): {description!r}"
    return description, (notice,) if folded else ()


def parse_span(here: str, raw: Any) -> tuple[int, str]:
    """nnodes and the group of hosts it spans: both, or neither (one box). `here` names the layout."""
    if not isinstance(raw, Mapping):
        return 1, ""  # parse_layout refuses it with the whole layout in view
    nnodes = text.whole_number(f"{here}.nnodes", raw.get("nnodes", 1), low=1, high=MAX_WIDTH, example=2)
    nodes = raw.get("nodes")
    if nnodes == 1:
        if nodes not in (None, ""):
            raise text.refuse(
                f"{here}.nodes", nodes, "is set but nnodes is 1", "set nnodes to the number of hosts, or drop nodes"
            )
        return 1, ""
    if nodes in (None, ""):
        raise text.refuse(
            f"{here}.nodes",
            nodes,
            f"nnodes is {nnodes} but no inventory group of hosts is named",
            "add nodes: GROUP, the inventory group whose hosts (in order) are node ranks 0, 1, ...",
        )
    group = text.matching(
        f"{here}.nodes", nodes, GROUP_NAME, max_length=64, what="an inventory group name", fix="write e.g. nodes: k26_pair"
    )
    return nnodes, group


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
    flag_table: flags.FlagTable | None = None,
    path: str = "sglang_layouts",
    drafts: Mapping[str, Draft] | None = None,
) -> Layout:
    """Validate one declared layout and merge the common args and env under it.

    With the installed SGLang's flag table, arg names are resolved as argparse resolves them
    before the reserved check; without it, a prefix of a reserved flag is refused too.
    """
    text.matching(
        f"{path}.{name}",
        name,
        LAYOUT_NAME,
        max_length=48,
        what="a layout name matching [a-z0-9-]+, starting with a letter or digit (it becomes part of a systemd unit name)",
        fix="rename it, e.g. ep8-tuned",
    )
    here = f"{path}.{name}"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise text.refuse(here, raw, "a layout must be a mapping", "write e.g. {tp: 8, ep: 4}")
    unknown = sorted((key for key in raw if key not in LAYOUT_KEYS), key=str)
    if unknown:
        raise text.refuse(
            f"{here}.{unknown[0]}",
            raw[unknown[0]],
            "is not a layout field",
            f"use only {', '.join(sorted(LAYOUT_KEYS))}; server flags go under args",
        )
    sizes = {key: _positive_int(f"{here}.{key}", raw.get(key, 1)) for key in PARALLEL_KEYS}
    gpus = sizes["dp"] * sizes["tp"] * sizes["pp"]
    if gpus > MAX_GPUS:
        raise text.refuse(here, sizes, f"dp x tp x pp = {gpus} GPUs, more than {MAX_GPUS}", "check the sizes")
    description, notices = _description(f"{here}.description", raw.get("description"))
    nnodes, nodes = parse_span(here, raw)
    own = _args(f"{here}.args", raw.get("args"), flag_table)
    draft = _draft(here, raw.get("draft"), drafts or {})
    if draft is not None:
        own = _with_draft(here, draft, own, flag_table)
    return Layout(
        name=name,
        draft=draft.name if draft else "",
        power_limit=_power_limit(f"{here}.power_limit", raw.get("power_limit")),
        args=merge_args(_args("sglang_common_args", common_args, flag_table), own),
        env={**_env("sglang_common_env", common_env), **_env(f"{here}.env", raw.get("env"))},
        description=description,
        hardening=hardening.parse_overrides(f"{here}.hardening", raw.get("hardening")),
        notices=notices,
        nnodes=nnodes,
        nodes=nodes,
        **sizes,
    )


def _power_limit(path: str, value: Any) -> int | None:
    return None if value is None else text.whole_number(path, value, low=1, high=MAX_POWER_LIMIT_W, example=450)


def _draft(here: str, name: Any, drafts: Mapping[str, Draft]) -> Draft | None:
    if name in (None, ""):
        return None
    if not isinstance(name, str) or name not in drafts:
        declared = ", ".join(drafts) or "none"
        raise text.refuse(
            f"{here}.draft", name, "is not declared in sglang_draft_models", f"declare it there (declared: {declared})"
        )
    return drafts[name]


def _with_draft(here: str, draft: Draft, own: dict[str, ArgValue], table: flags.FlagTable | None) -> dict[str, ArgValue]:
    """The draft's flags and args under the layout's own args; the two flags the draft sets are its alone."""
    for flag in own:
        if flag in DRAFT_FLAGS or flag == "speculative-draft-model":  # the path's alias in 0.5.23
            raise text.refuse(
                f"{here}.args.{flag}",
                own[flag],
                f"is set by the layout's draft ({draft.name})",
                "remove it from args, or drop draft",
            )
    drafted = _args(f"sglang_draft_models.{draft.name}.args", draft.args, table)
    return merge_args(merge_args(draft.flags(), drafted), own)


def parse_layouts(
    raw: Any,
    *,
    common_args: Mapping[str, ArgValue] | None = None,
    common_env: Mapping[str, str] | None = None,
    flag_table: flags.FlagTable | None = None,
    drafts: Mapping[str, Draft] | None = None,
) -> dict[str, Layout]:
    """Validate the whole `sglang_layouts` dict, in declaration order."""
    if not isinstance(raw, Mapping) or not raw:
        raise text.refuse(
            "sglang_layouts",
            raw,
            "must be a non-empty mapping of layout name to layout",
            "declare at least one layout in group_vars, e.g. sglang_layouts: {tp8: {tp: 8}}",
        )
    return {
        name: parse_layout(name, spec, common_args=common_args, common_env=common_env, flag_table=flag_table, drafts=drafts)
        for name, spec in raw.items()
    }


def select_layout(layouts: Mapping[str, Layout], name: Any) -> Layout:
    """The layout the user asked for, or an error listing the declared ones."""
    if name in (None, ""):
        raise DeclarationError("layout", name, "no layout was given", f"pass -e layout=NAME, one of: {', '.join(layouts)}")
    if not isinstance(name, str) or name not in layouts:
        raise text.refuse("layout", name, "is not declared in sglang_layouts", f"use one of: {', '.join(layouts)}")
    return layouts[name]
