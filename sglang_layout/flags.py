"""The installed SGLang's own word on its flags: parse `--help`, check a command line against it.

SGLang's launcher is argparse with abbreviations allowed, so a flag that is
merely a prefix of real ones is accepted when it is unique and refused as
ambiguous otherwise (0.5.23 refuses `--cuda-graph-max-bs`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sglang_layout.findings import Finding

# An option line in argparse help is indented by exactly two spaces; help text
# wrapped under it is indented further.
_OPTION_LINE = re.compile(r"^ {2}(-[^ ].*)$")
_HELP_SEPARATOR = re.compile(r" {2,}")


@dataclass(frozen=True)
class FlagSpec:
    names: tuple[str, ...]
    takes_value: bool
    choices: tuple[str, ...] | None = None

    @property
    def canonical(self) -> str:
        return self.names[0]


@dataclass(frozen=True)
class FlagTable:
    version: str
    options: tuple[FlagSpec, ...]
    by_name: dict[str, FlagSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {name: spec for spec in self.options for name in spec.names})

    def to_json(self) -> dict[str, Any]:
        return {
            "sglang_version": self.version,
            "options": [
                {
                    "names": list(spec.names),
                    "takes_value": spec.takes_value,
                    "choices": list(spec.choices) if spec.choices is not None else None,
                }
                for spec in self.options
            ],
        }


MAX_OPTIONS = 10_000


def _spec_from_json(item: Any) -> FlagSpec:
    if not isinstance(item, Mapping):
        raise ValueError(f"an option must be an object, not {type(item).__name__}")
    names, takes_value, choices = item.get("names"), item.get("takes_value"), item.get("choices")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.startswith("-") for n in names):
        raise ValueError(f"option names must be a non-empty list of '-' flags, not {str(names)[:80]}")
    if not isinstance(takes_value, bool):
        raise ValueError(f"takes_value of {names[0]} must be true or false")
    if choices is not None and (not isinstance(choices, list) or not all(isinstance(c, str) for c in choices)):
        raise ValueError(f"choices of {names[0]} must be a list of strings or null")
    return FlagSpec(names=tuple(names), takes_value=takes_value, choices=tuple(choices) if choices is not None else None)


def table_from_json(data: Mapping[str, Any]) -> FlagTable:
    """A table as saved by `FlagTable.to_json` (or the shared 0.5.23 reference); ValueError when it is not one."""
    options = data.get("options") if isinstance(data, Mapping) else None
    if not isinstance(options, list) or not options:
        raise ValueError("not a flag table (expected a non-empty options[] of names/takes_value/choices)")
    if len(options) > MAX_OPTIONS:
        raise ValueError(f"not a flag table: {len(options)} options, more than {MAX_OPTIONS}")
    try:
        specs = tuple(_spec_from_json(item) for item in options)
    except ValueError as exc:
        raise ValueError(f"not a flag table: {exc}") from exc
    return FlagTable(version=str(data.get("sglang_version", "unknown"))[:64], options=specs)


def _split_invocation(invocation: str) -> list[str]:
    """Split '--a A, --b {x,y}' at the ', ' between option strings (never inside braces)."""
    parts, depth, current = [], 0, []
    i = 0
    while i < len(invocation):
        char = invocation[i]
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        if depth == 0 and invocation.startswith(", -", i):
            parts.append("".join(current))
            current = []
            i += 2
            continue
        current.append(char)
        i += 1
    parts.append("".join(current))
    return parts


def _parse_option_line(line: str) -> FlagSpec | None:
    match = _OPTION_LINE.match(line)
    if not match:
        return None
    invocation = _HELP_SEPARATOR.split(match.group(1), maxsplit=1)[0]
    names: list[str] = []
    takes_value = False
    choices: tuple[str, ...] | None = None
    for part in _split_invocation(invocation):
        name, _, metavar = part.strip().partition(" ")
        if not name.startswith("-"):
            return None
        names.append(name)
        if metavar:
            takes_value = True
            brace = re.match(r"\[?\{([^}]*)\}", metavar)
            if brace:
                choices = tuple(brace.group(1).split(","))
    return FlagSpec(names=tuple(names), takes_value=takes_value, choices=choices)


def parse_help(text: str, version: str = "unknown") -> FlagTable:
    """Parse argparse `--help` output into a flag table (usage lines are skipped)."""
    options = [spec for line in text.splitlines() if (spec := _parse_option_line(line))]
    if not options:
        raise ValueError("no options found: this does not look like argparse --help output")
    return FlagTable(version=version, options=tuple(options))


def load_table(text: str, version: str = "unknown") -> FlagTable:
    """A flag table from either its JSON form or raw `--help` text."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a flag table: invalid JSON ({exc})") from exc
        return table_from_json(data)
    return parse_help(text, version)


def resolve(table: FlagTable, option: str) -> tuple[FlagSpec | None, list[FlagSpec]]:
    """What argparse would make of `option`: (exact or unique-prefix spec, all prefix candidates)."""
    if option in table.by_name:
        return table.by_name[option], []
    if not option.startswith("--"):
        return None, []
    candidates: dict[str, FlagSpec] = {}
    for name, spec in table.by_name.items():
        if name.startswith(option):
            candidates[spec.canonical] = spec
    found = list(candidates.values())
    if len(found) == 1:
        return found[0], found
    return None, found


def _suggest(table: FlagTable, option: str) -> list[str]:
    import difflib

    return difflib.get_close_matches(option, list(table.by_name), n=3, cutoff=0.75)


def check_argv(argv: Sequence[str], table: FlagTable) -> list[Finding]:
    """Check a rendered server command line (flags and values, no program name)."""
    findings: list[Finding] = []
    given: dict[str, str] = {}  # canonical flag -> the spelling that gave it first
    for option, values in _options(argv, findings):
        spec, candidates = resolve(table, option)
        if spec is None:
            findings.append(_unknown(table, option, candidates))
            continue
        findings += _spelling(table, spec, option, given)
        findings += _values(table, spec, option, values)
    return findings


def _options(argv: Sequence[str], findings: list[Finding]) -> list[tuple[str, list[str]]]:
    """(flag as written, its values) in order; a value with no flag before it is a finding."""
    found, i = [], 0
    while i < len(argv):
        option = argv[i]
        i += 1
        if not option.startswith("-"):
            findings.append(
                Finding.error("flags", f"stray value {option!r} with no flag before it", "check the args of the layout")
            )
            continue
        values: list[str] = []
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        found.append((option, values))
    return found


def _unknown(table: FlagTable, option: str, candidates: list[FlagSpec]) -> Finding:
    """A flag the installed SGLang does not know: ambiguous (several it abbreviates) or absent."""
    where = f"SGLang {table.version}"
    if candidates:
        spellings = ", ".join(sorted(name for c in candidates for name in c.names if name.startswith(option)))
        return Finding.error(
            "flags",
            f"{option} is ambiguous in {where}: it could match {spellings}; argparse refuses to start",
            f"write one of {spellings} in full",
        )
    close = _suggest(table, option)
    return Finding.error(
        "flags",
        f"{option} is not a flag of {where}",
        f"did you mean {' or '.join(close)}?"
        if close
        else f"remove it; `python -m sglang.launch_server --help` lists what {where} accepts",
    )


def _spelling(table: FlagTable, spec: FlagSpec, option: str, given: dict[str, str]) -> list[Finding]:
    """A flag given twice under two spellings, or by an abbreviation a later version may make ambiguous."""
    where, found = f"SGLang {table.version}", []
    if spec.canonical in given:
        found.append(
            Finding.error(
                "flags",
                f"{given[spec.canonical]} and {option} are one flag, {spec.canonical}, in {where}; the last value would win",
                "give the flag once, by its full name",
            )
        )
    given.setdefault(spec.canonical, option)
    if option not in spec.names:
        found.append(
            Finding.warning(
                "flags",
                f"{option} is only an abbreviation of {spec.canonical} in {where}; a later version may make it ambiguous",
                f"write {spec.canonical}",
            )
        )
    return found


def _values(table: FlagTable, spec: FlagSpec, option: str, values: list[str]) -> list[Finding]:
    """A value missing, given to a switch, or outside the flag's choices."""
    where = f"SGLang {table.version}"
    if spec.takes_value and not values:
        return [
            Finding.error("flags", f"{option} needs a value in {where}", f"give it a value, e.g. {option.lstrip('-')}: VALUE")
        ]
    if not spec.takes_value and values:
        return [
            Finding.error(
                "flags",
                f"{option} is a switch in {where} and takes no value (got {' '.join(values)})",
                f"write {option.lstrip('-')}: true (or false to leave it out)",
            )
        ]
    bad = [value for value in values if spec.choices is not None and value not in spec.choices]
    if bad:
        return [
            Finding.error(
                "flags", f"{option} {bad[0]} is an invalid choice in {where}", f"choose one of {', '.join(spec.choices or ())}"
            )
        ]
    return []
