"""What a layout's systemd unit holds: its name, the ExecStart line and the environment, quoted for systemd."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sglang_layout import command
from sglang_layout.schema import Layout

_NEEDS_QUOTES = re.compile(r"""[\s"'\\;]""")


def unit_name(model_slug: str, layout_name: str) -> str:
    return f"sglang-{model_slug}-{layout_name}.service"


def systemd_word(word: str) -> str:
    """One ExecStart/Environment word as systemd reads it back: % and $ doubled, quoted when needed."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if escaped and not _NEEDS_QUOTES.search(escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_assignment(name: str, value: str) -> str:
    """KEY=value for Environment= (no $ expansion there, but % specifiers still apply)."""
    escaped = f"{name}={value}".replace("%", "%%")
    if not _NEEDS_QUOTES.search(escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class UnitSpec:
    name: str
    layout: str
    description: str
    argv: list[str]
    environment: dict[str, str]

    @property
    def exec_start(self) -> str:
        return " ".join(systemd_word(word) for word in self.argv)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "layout": self.layout,
            "description": self.description,
            "argv": self.argv,
            "command": command.shell_line(self.argv),
            "exec_start": self.exec_start,
            "environment": self.environment,
            "environment_lines": [systemd_assignment(key, value) for key, value in self.environment.items()],
        }


def unit_spec(
    layout: Layout,
    *,
    model_slug: str,
    model_path: str,
    port: int,
    host: str,
    venv: str,
    python_version: str,
    cuda_home: str,
    base_env: Mapping[str, str] | None = None,
) -> UnitSpec:
    """The unit for one layout: the field notes' command and environment, from the one renderer."""
    args = command.server_args(layout, model_path=model_path, port=port, host=host)
    environment = command.service_environment(
        layout, venv=venv, cuda_home=cuda_home, python_version=python_version, base_env=base_env
    )
    return UnitSpec(
        name=unit_name(model_slug, layout.name),
        layout=layout.name,
        description=layout.description,
        argv=command.launch_command(f"{venv}/bin/python", args),
        environment=environment,
    )
