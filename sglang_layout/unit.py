"""What a layout's systemd unit holds: its name, the ExecStart line and the environment, quoted for systemd."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from sglang_layout import command, defaults, hardening, instances, text
from sglang_layout.nodes import NodePlace
from sglang_layout.schema import Layout

_NEEDS_QUOTES = re.compile(r"""[\s"'\\;]""")
ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]*")
# What a unit file says of itself, on lines of its own (roles/sglang_service/templates/sglang.service.j2).
LAYOUT_MARK, NODE_MARK, COMMAND_MARK = "X-SGLang-Layout=", "X-SGLang-Node=", "# Command: "


def systemd_word(word: str) -> str:
    """One ExecStart/Environment word as systemd reads it back: % and $ doubled, quoted when needed."""
    if word == command.SECRETS_FILE_IN_UNIT:
        return word  # the one specifier we mean: %d, the unit's credentials directory
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
    hardening: dict[str, hardening.HardeningValue]
    user: str = defaults.SERVICE_USER
    group: str = defaults.SERVICE_USER
    state_dir: str = defaults.STATE_DIR
    secrets_source: str | None = None  # the root-only file systemd hands over as a credential
    node: NodePlace | None = None  # this host's part of a multi-node layout
    health_url: str = ""  # /health_generate as the host reaches it (a wildcard bind address on loopback)
    power_limit: int | None = None  # watts per GPU of the unit's CUDA_VISIBLE_DEVICES while it runs

    @property
    def power_lines(self) -> list[str]:
        """A layout's power limit, set as its unit starts and put back as it stops however it stops (a crash, a
        failed start, a stop): the limit never outlives its server. Root (+), outside the sandbox. A unit without
        a limit runs no helper: its stops stay as quick, and its journal the server's alone."""
        if not self.power_limit:
            return []
        # "-": a limit that cannot be put back is said in the journal, not turned into a failed server.
        return [
            f"ExecStartPre=+{defaults.POWER_LIMIT_HELPER} set %n {self.power_limit}",
            f"ExecStopPost=-+{defaults.POWER_LIMIT_HELPER} restore %n",
        ]

    @property
    def exec_start(self) -> str:
        return " ".join(systemd_word(word) for word in self.argv)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "layout": self.layout,
            "description": self.description,
            "argv": self.argv,
            "command": command.shell_line(
                [
                    word.replace("%d/", "$CREDENTIALS_DIRECTORY/") if word == command.SECRETS_FILE_IN_UNIT else word
                    for word in self.argv
                ]
            ),
            "exec_start": self.exec_start,
            "environment": self.environment,
            "environment_lines": [systemd_assignment(key, value) for key, value in self.environment.items()],
            "hardening_lines": hardening.unit_lines(self.hardening),
            "user": self.user,
            "group": self.group,
            "state_dir": self.state_dir,
            "credential_line": f"{command.SECRETS_CREDENTIAL}:{self.secrets_source}" if self.secrets_source else "",
            "node_rank": self.node.rank if self.node else 0,
            "nnodes": self.node.nnodes if self.node else 1,
            "dist_init_addr": self.node.dist_init_addr if self.node else "",
            "health_url": self.health_url,
            "power_limit": self.power_limit,
            "power_lines": self.power_lines,
            "power_helper": defaults.POWER_LIMIT_HELPER,
        }


def _check_slice(layout: Layout, gpu_ids: list[int] | None) -> None:
    if gpu_ids and len(gpu_ids) < layout.gpus_per_node:
        raise text.refuse(
            "sglang_gpu_ids",
            gpu_ids,
            f"{layout.name} needs {layout.gpus_per_node} GPUs per node, the slice has {len(gpu_ids)}",
            "give the instance more GPUs or deploy a smaller layout",
        )


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
    state_dir: str = defaults.STATE_DIR,
    user: str = defaults.SERVICE_USER,
    group: str = defaults.SERVICE_USER,
    hardening_overrides: Mapping[str, hardening.HardeningValue | None] | None = None,
    secrets_source: str | None = None,
    node: NodePlace | None = None,
    instance: str = "",
    gpu_ids: list[int] | None = None,
) -> UnitSpec:
    """The unit for one layout: the field notes' command and environment, from the one renderer.

    The paths that come from the host's install record are checked like the declaration's. An instance
    (several servers on one machine) runs on its GPU slice, `gpu_ids`, under a unit name of its own.
    """
    instance = instances.instance_name(instance)
    _check_slice(layout, gpu_ids)
    venv, cuda_home, state_dir = _install_paths(venv, cuda_home, state_dir, user, group, python_version)
    if secrets_source is not None:
        secrets_source = text.absolute_path("sglang_service_secrets_dir", secrets_source, example="/etc/sglang/secrets/k26.yaml")
    args = command.server_args(
        layout,
        model_path=model_path,
        port=port,
        host=host,
        secrets_file=command.SECRETS_FILE_IN_UNIT if secrets_source else None,
        node=node,
    )
    base_env = _install_environment(layout, base_env or {})
    environment = command.service_environment(
        layout, venv=venv, cuda_home=cuda_home, python_version=python_version, base_env=base_env, gpu_ids=gpu_ids
    )
    return UnitSpec(
        name=instances.unit_name(model_slug, layout.name, instance),
        layout=layout.name,
        description=layout.description,
        argv=command.launch_command(f"{venv}/bin/python", args),
        environment=environment,
        hardening=hardening.merged(state_dir, hardening_overrides or {}, layout.hardening),
        user=user,
        group=group,
        state_dir=state_dir,
        secrets_source=secrets_source,
        node=node,
        health_url=defaults.local_url(host, port, "/health_generate"),
        power_limit=layout.power_limit,
    )


def _install_paths(venv: str, cuda_home: str, state_dir: str, user: str, group: str, python_version: str) -> tuple[str, str, str]:
    """The paths and accounts from the host's install record, checked like the declaration's."""
    venv = text.absolute_path("venv", venv, example="/opt/sglang/venv-0.5.23")
    cuda_home = text.absolute_path("cuda_home", cuda_home, example="/usr/local/cuda-13.0")
    state_dir = text.absolute_path("state_dir", state_dir, example="/var/lib/sglang")
    for field, name in (("sglang_venv_user", user), ("sglang_venv_group", group)):
        text.matching(field, name, ACCOUNT, max_length=32, what="a user or group name", fix="write e.g. sglang")
    if not python_version or not all(part.isdigit() for part in python_version.split(".")):
        raise text.refuse("python_version", python_version, "is not a Python version", "re-run playbooks/provision.yml")
    return venv, cuda_home, state_dir


def _install_environment(layout: Layout, base_env: Mapping[str, str]) -> dict[str, str]:
    """The install record's environment, checked; a layout variable that it also sets is refused."""
    checked = {
        text.matching(
            f"install environment {key}", key, ENV_KEY, max_length=128, what="a variable name", fix="re-run provision"
        ): (text.plain_text(f"install environment {key}", value))
        for key, value in base_env.items()
    }
    for name, value in layout.env.items():
        if name in checked:
            raise text.refuse(
                f"sglang_layouts.{layout.name}.env.{name}",
                value,
                f"the host's install record sets {name} ({checked[name]})",
                "remove it from env; change it through the sglang_venv role's variables",
            )
    return checked


def read_unit_file(text: str) -> dict[str, object]:
    """What one of this project's unit files says of itself: its layout, its command and its part of a
    multi-node layout (node rank and number of nodes; 0 and 1 on one box), for the record of what serves.

    A unit written before it carried X-SGLang-Node= says its part only in its command (--nnodes, --node-rank).
    """
    found: dict[str, str] = {}
    for line in text.splitlines():
        for mark in (LAYOUT_MARK, NODE_MARK, COMMAND_MARK):
            if line.startswith(mark) and mark not in found:
                found[mark] = line[len(mark) :].strip()
    command_line = found.get(COMMAND_MARK, "")
    if NODE_MARK in found:
        rank, _, nnodes = found[NODE_MARK].partition("/")
    else:
        words = shlex.split(command_line)
        flag = {word: words[index + 1] for index, word in enumerate(words[:-1]) if word in ("--nnodes", "--node-rank")}
        rank, nnodes = flag.get("--node-rank", "0"), flag.get("--nnodes", "1")
    if not (rank.isdigit() and nnodes.isdigit()):
        raise ValueError(f"the unit's part of its layout is not rank/nodes: {rank}/{nnodes}")
    return {"layout": found.get(LAYOUT_MARK, ""), "command": command_line, "node_rank": int(rank), "nnodes": int(nnodes)}
