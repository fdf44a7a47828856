"""This project's Ansible modules loaded as Python for the unit tests, their shared code under the name Ansible
gives it (ansible.module_utils.sglang_host): standard library only, as on the host."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_helpers() -> ModuleType:
    """plugins/module_utils/sglang_host.py."""
    return _load("sglang_host", PLUGINS / "module_utils" / "sglang_host.py")


def host_module(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """plugins/modules/NAME.py, its `from ansible.module_utils.sglang_host import ...` served by host_helpers()."""
    monkeypatch.setitem(sys.modules, "ansible.module_utils.sglang_host", host_helpers())
    return _load(name, PLUGINS / "modules" / f"{name}.py")
