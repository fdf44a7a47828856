"""Every module of plugins/modules documents itself as ansible-doc reads it: DOCUMENTATION, EXAMPLES and RETURN
parse as YAML (ansible-lint only prints an error for one that does not, and passes), and the options documented
are the options the module takes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.unit.host_modules import PLUGINS

MODULES = sorted((PLUGINS / "modules").glob("*.py"))


def documented(path: Path) -> dict[str, object]:
    """The module's DOCUMENTATION, EXAMPLES and RETURN strings, parsed."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            found[target.id] = yaml.safe_load(node.value.value)
    return found


def argument_spec(path: Path) -> set[str]:
    """The option names of the module's AnsibleModule(argument_spec={...}) literal."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec" and isinstance(node.value, ast.Dict):
            return {key.value for key in node.value.keys if isinstance(key, ast.Constant)}
    raise AssertionError(f"{path.name}: no argument_spec literal")


@pytest.mark.parametrize("path", MODULES, ids=[path.stem for path in MODULES])
def test_each_module_documents_what_it_takes(path):
    docs = documented(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path.name
    assert docs["DOCUMENTATION"]["module"] == path.stem
    assert set(docs["DOCUMENTATION"].get("options") or {}) == argument_spec(path)
