"""STAND-IN for SGLang's argument parser (test use only; never installed by a role's defaults).

Built from a flag table (names, aliases, value or switch, choices) taken from
a real SGLang's --help, so spellings, aliases, abbreviations, ambiguity and
invalid choices behave as argparse behaves in the real launcher.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml


def load_table() -> dict[str, Any]:
    return json.loads(resources.files("sglang").joinpath("flags.json").read_text())


def build_parser(table: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    table = table or load_table()
    parser = argparse.ArgumentParser(prog="python -m sglang.launch_server", add_help=False)
    for option in table["options"]:
        names = option["names"]
        if "--help" in names:
            parser.add_argument(*names, action="help")
        elif any(name.startswith("--no-") for name in names[1:]):
            parser.add_argument(names[0], action=argparse.BooleanOptionalAction, default=None)
        elif option["takes_value"]:
            parser.add_argument(*names, choices=option["choices"], default=None)
        else:
            parser.add_argument(*names, action="store_true")
    return parser


def with_config_file(argv: list[str]) -> list[str]:
    """SGLang's --config FILE (YAML): its `key: value` lines become `--key value` ahead of the command line."""
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    path = Path(argv[at + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {path.suffix}")
    data = yaml.safe_load(path.read_text()) or {}
    prefix: list[str] = []
    for key, value in data.items():
        if value is True:
            prefix.append(f"--{key}")
        elif isinstance(value, list):
            prefix += [f"--{key}", *map(str, value)]
        elif value is not False:
            prefix += [f"--{key}", str(value)]
    return prefix + argv[:at] + argv[at + 2 :]
