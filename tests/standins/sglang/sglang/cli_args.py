"""STAND-IN for SGLang's argument parser (test use only; never installed by a role's defaults).

Built from a flag table (names, aliases, value or switch, choices) taken from
a real SGLang's --help, so spellings, aliases, abbreviations, ambiguity and
invalid choices behave as argparse behaves in the real launcher.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from typing import Any


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
