"""Search candidates: declared layouts crossed with a grid of server flags, environment values, speculative
drafts (`draft=NAME,none`) and host settings (`host.power_limit=300,450,none`) (pure).

A candidate is an ordinary layout entry (the declared one with the grid's values merged into its
args, and an `env.NAME` axis's into its env), so every rule of the declaration and of preflight
applies to it unchanged: an environment value is data, and the variables the declaration refuses
(CUDA_VISIBLE_DEVICES, LD_PRELOAD, ...) are refused on a grid too. A candidate without
grid values keeps its layout's name; one with values is named `<layout>-g<hash of the values>`, the
same for the same values in every search, so its unit and its stored runs are found again.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sglang_layout.errors import DeclarationError

GridValue = str | int | float | bool | None
_FLAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_ENV_AXIS = re.compile(r"env\.[A-Za-z_][A-Za-z0-9_]*")
ENV_PREFIX = "env."
DRAFT_AXIS = "draft"  # a speculative draft by its declared name (sglang_draft_models); none: without one
# Host settings a candidate's unit applies as it starts (host.NAME=V1,V2), each a layout field of that name.
HOST_PREFIX = "host."
HOST_AXES = {"host.power_limit": "power_limit"}  # GPU power limit in watts, nvidia-smi -pl
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_GRID_VALUES = 64
MAX_CANDIDATES = 512


@dataclass(frozen=True)
class Candidate:
    name: str
    layout: str  # the declared layout it comes from
    overrides: dict[str, GridValue] = field(default_factory=dict)
    entry: dict[str, Any] = field(default_factory=dict)  # the layout entry, as sglang_layouts holds it

    @property
    def label(self) -> str:
        """`ep8` or `ep8 + max-running-requests=64, num-continuous-decode-steps=8`."""
        if not self.overrides:
            return self.layout
        return f"{self.layout} + " + ", ".join(f"{key}={value_text(value)}" for key, value in self.overrides.items())


def value_text(value: GridValue) -> str:
    """A grid value as the user writes it: `drop` for none (no flag, no draft, the host's own setting)."""
    return "drop" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _value(text: str) -> GridValue:
    """A grid value as the declaration would hold it: true (bare switch), false/none (drop the flag), numbers, words."""
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered in ("false", "none", "null", "drop"):
        return None
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def parse_grid(spec: str) -> tuple[str, tuple[GridValue, ...]]:
    """`max-running-requests=64,256` -> ('max-running-requests', (64, 256)); `env.NCCL_P2P_DISABLE=0,1` ->
    ('env.NCCL_P2P_DISABLE', ('0', '1')): an environment value stays the text it is."""
    name, sep, values = spec.partition("=")
    name = name.strip().removeprefix("--")
    fix = (
        "write FLAG=V1,V2,... with the flag's name without dashes, e.g. --grid max-running-requests=64,256, "
        "or env.VARIABLE=V1,V2 for the environment, e.g. --grid env.NCCL_P2P_DISABLE=0,1"
    )
    environment = name.startswith(ENV_PREFIX)
    if name.startswith(HOST_PREFIX) and name not in HOST_AXES:
        known = ", ".join(HOST_AXES)
        raise DeclarationError("--grid", spec, "not a host setting", f"use one of {known}, e.g. --grid host.power_limit=300,none")
    if not sep or (name not in HOST_AXES and not (_ENV_AXIS if environment else _FLAG).fullmatch(name)):
        raise DeclarationError("--grid", spec, "not a flag or env.VARIABLE name followed by '=' and values", fix)
    parts = [part.strip() for part in values.split(",")]
    if any(part == "" for part in parts):
        raise DeclarationError("--grid", spec, "an empty value", fix)
    if len(parts) > MAX_GRID_VALUES:
        raise DeclarationError("--grid", spec, f"more than {MAX_GRID_VALUES} values", "split the search in several")
    if name == DRAFT_AXIS:
        parsed: tuple[GridValue, ...] = tuple(None if part.lower() in ("none", "drop") else part for part in parts)
    else:
        parsed = tuple(part if environment else _value(part) for part in parts)
    if len(set(map(repr, parsed))) != len(parsed):
        raise DeclarationError("--grid", spec, "a value is given twice", "give each value once")
    return name, parsed


def candidate_name(layout: str, overrides: Mapping[str, GridValue]) -> str:
    if not overrides:
        return layout
    digest = hashlib.sha256(json.dumps(dict(overrides), sort_keys=True).encode()).hexdigest()[:6]
    return f"{layout}-g{digest}"


def distinct_axes(grid: Sequence[tuple[str, tuple[GridValue, ...]]]) -> list[str]:
    """The grid's axes, each given once (else the error naming them)."""
    flags = [name for name, _ in grid]
    if len(set(flags)) != len(flags):
        raise DeclarationError("--grid", ", ".join(flags), "a flag is given twice", "put all its values in one --grid")
    return flags


def expand(
    layouts: Mapping[str, Any], chosen: Sequence[str] | None, grid: Sequence[tuple[str, tuple[GridValue, ...]]]
) -> list[Candidate]:
    """Each chosen layout (all, in declared order, when None) crossed with every combination of the grid."""
    names = list(layouts) if chosen is None else list(dict.fromkeys(chosen))
    unknown = [name for name in names if name not in layouts]
    if unknown:
        raise DeclarationError(
            "--layouts", ",".join(unknown), "not declared", f"choose from sglang_layouts: {', '.join(layouts) or 'none'}"
        )
    flags = distinct_axes(grid)
    combos = [dict(zip(flags, values, strict=True)) for values in itertools.product(*(values for _, values in grid))]
    if len(names) * len(combos) > MAX_CANDIDATES:
        raise DeclarationError(
            "--layouts x --grid",
            f"{len(names)} layouts x {len(combos)} grid points",
            f"{len(names) * len(combos)} candidates, more than {MAX_CANDIDATES}",
            "choose fewer layouts or grid values",
        )
    candidates = []
    for layout in names:
        for overrides in combos:
            entry = copy.deepcopy(layouts[layout]) if isinstance(layouts[layout], Mapping) else layouts[layout]
            name = candidate_name(layout, overrides)
            if overrides and isinstance(entry, dict):
                flags_over = {
                    k: v for k, v in overrides.items() if not k.startswith(ENV_PREFIX) and k != DRAFT_AXIS and k not in HOST_AXES
                }
                env_over = {k.removeprefix(ENV_PREFIX): v for k, v in overrides.items() if k.startswith(ENV_PREFIX)}
                if flags_over:
                    args = entry.get("args") if isinstance(entry.get("args"), Mapping) else {}
                    entry["args"] = {**args, **flags_over}
                if env_over:
                    env = entry.get("env") if isinstance(entry.get("env"), Mapping) else {}
                    entry["env"] = {**env, **env_over}
                for axis, key in [(DRAFT_AXIS, DRAFT_AXIS), *HOST_AXES.items()]:
                    if axis in overrides:  # None: without it (no draft, the host's own limit)
                        entry[key] = overrides[axis]
                        if overrides[axis] is None:
                            del entry[key]
                described = entry.get("description") or layout
                entry["description"] = f"{described}; search: " + ", ".join(f"{k}={value_text(v)}" for k, v in overrides.items())
            if overrides and name in layouts:
                raise DeclarationError(
                    f"sglang_layouts.{name}", name, "a declared layout has the name of a search candidate", "rename it"
                )
            candidates.append(Candidate(name=name, layout=layout, overrides=dict(overrides), entry=entry))
    return candidates


def declaration_hash(entry: Any, shared: Mapping[str, Any]) -> str:
    """What decides a candidate's server: its entry plus the declaration's shared settings (common args, model, version)."""
    text = json.dumps({"layout": entry, **shared}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
