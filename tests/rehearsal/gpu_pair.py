"""Two provisioned GPU rehearsal boxes in one inventory: the nodes of a two-node layout, or two identical hosts.

Both are in sglang_servers and, in that order, in the group `k26_pair` (box a is rank 0). The boxes share
the host's network, so each has its own API port; rank 0 listens for the rendezvous on 127.0.0.1:<dist port>.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from sglang_layout.sources import load_yaml_vars
from tests.rehearsal import box as boxes
from tests.rehearsal import gpu_host, standin
from tests.rehearsal.bench import REPO
from tests.rehearsal.playbook import PlaybookRun, run_playbook

GROUP = "k26_pair"
LAYOUTS = {
    "tp16": {"description": "TP16 over two 8-GPU boxes", "tp": 16, "nnodes": 2, "nodes": GROUP},
    # 4 GPUs per box: ~69 GiB of weights per GPU, more than box b really has in the rollback test.
    "tp8x2": {"tp": 8, "nnodes": 2, "nodes": GROUP},
}


def unit(layout: str) -> str:
    return f"sglang-k26-{layout}.service"


@dataclass
class Pair:
    a: boxes.Box
    b: boxes.Box
    inventory: Path
    ports: dict[str, int]
    dist_port: int

    @property
    def boxes(self) -> tuple[boxes.Box, boxes.Box]:
        return self.a, self.b

    def deploy(self, layout: str, *options: str) -> PlaybookRun:
        return run_playbook("deploy.yml", self.inventory, None, "-e", f"layout={layout}", *options)

    def show(self, box: boxes.Box, layout: str, prop: str) -> str:
        return box.run("systemctl", "show", f"--property={prop}", "--value", unit(layout)).stdout.strip()

    def active(self, box: boxes.Box, layout: str) -> str:
        return box.run("systemctl", "is-active", unit(layout), check=False).stdout.strip()

    def fact(self, box: boxes.Box) -> dict:
        return json.loads(box.run("sudo", "cat", "/etc/ansible/facts.d/sglang_service.fact").stdout)

    def url(self, box: boxes.Box) -> str:
        return f"http://127.0.0.1:{self.ports[box.name]}"

    def pids(self, layout: str) -> list[str]:
        return [self.show(box, layout, "MainPID") for box in self.boxes]


@contextmanager
def changed_json(path: Path, **fields: object) -> Iterator[None]:
    """A box's JSON file with some fields changed (a model's config.json, the stand-in's simulation) for the
    length of the block, put back as it was afterwards."""
    original = path.read_text()
    path.write_text(json.dumps({**json.loads(original), **fields}))
    try:
        yield
    finally:
        path.write_text(original)


def model_config(box: boxes.Box) -> Path:
    return box.root / gpu_host.MODEL_PATH.lstrip("/") / "config.json"


def write_inventory(a: boxes.Box, b: boxes.Box, directory: Path, repo_base_url: str, ports: dict[str, int], dist: int) -> Path:
    for box in (a, b):
        gpu_host.prepare(box, directory, repo_base_url)  # stand-in edges and the model on each box
    # The project's declared layouts and the two-node ones (host vars beat group_vars, as a user's would).
    layouts = {**load_yaml_vars([REPO / "group_vars" / "sglang_servers.yml"])["sglang_layouts"], **LAYOUTS}
    settings = {**standin.provision_vars(repo_base_url), "sglang_layouts": layouts, "sglang_dist_init_port": dist}
    hosts = {
        box.name: {**box.inventory()["sglang_servers"]["hosts"][box.name], **settings, **gpu_host.serving_vars(ports[box.name])}
        for box in (a, b)
    }
    inventory = {"sglang_servers": {"hosts": hosts}, GROUP: {"hosts": {a.name: None, b.name: None}}}
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path
