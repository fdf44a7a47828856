"""Two servers on one provisioned rehearsal box: instances r0 (GPUs 0-3) and r1 (GPUs 4-7), each with its port.

Both are inventory hosts on the same machine (same address and SSH port). They serve a smaller cut of the
model (25 of Kimi K2.6's 61 layers, ~227 GiB) so that TP4 fits on four simulated 95 GiB GPUs; the stand-in
loads that model's weights by its path (weights_gib_by_model), the rest of the box's simulation unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from sglang_layout.sources import load_yaml_vars
from tests.rehearsal import box as boxes
from tests.rehearsal import gpu_host
from tests.rehearsal.bench import REPO
from tests.rehearsal.playbook import PlaybookRun, run_playbook

MODEL_PATH = "/srv/models/Kimi-K2.6-25L"
LAYERS, WEIGHTS_GIB = 25, 227.0
SLICES = {"r0": "0-3", "r1": "4-7"}
LAYOUTS = {"tp4": {"description": "TP4 on a four-GPU slice", "tp": 4}, "tp4ep4": {"tp": 4, "ep": 4}}


@dataclass
class Instances:
    box: boxes.Box
    inventory: Path
    ports: dict[str, int]  # by instance

    def host(self, instance: str) -> str:
        return f"{self.box.name}-{instance}"

    def deploy(self, layout: str, *instances: str) -> PlaybookRun:
        hosts = ",".join(self.host(i) for i in instances or SLICES)
        return run_playbook("deploy.yml", self.inventory, None, "-e", f"layout={layout}", "--limit", hosts)

    def unit(self, layout: str, instance: str) -> str:
        return f"sglang-k26-{layout}.{instance}.service"

    def show(self, layout: str, instance: str, prop: str) -> str:
        return self.box.run("systemctl", "show", f"--property={prop}", "--value", self.unit(layout, instance)).stdout.strip()

    def fact(self, instance: str) -> dict:
        return json.loads(self.box.run("sudo", "cat", f"/etc/ansible/facts.d/sglang_service_{instance}.fact").stdout)

    def url(self, instance: str) -> str:
        return f"http://127.0.0.1:{self.ports[instance]}"


def prepare(box: boxes.Box, directory: Path, base_host: dict) -> Instances:
    """The smaller model on the box, its weights in the stand-in's simulation, and an inventory of two instances
    (each the box's own inventory entry, `base_host`, with its port, slice and the smaller model)."""
    config = json.loads(gpu_host.KIMI_CONFIG.read_text())
    model = box.root / MODEL_PATH.lstrip("/")
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": LAYERS}))
    simulation = box.root / "etc" / "sglang-standin.json"
    sim = json.loads(simulation.read_text())
    simulation.write_text(
        json.dumps({**sim, "weights_gib_by_model": {**sim.get("weights_gib_by_model", {}), MODEL_PATH: WEIGHTS_GIB}})
    )

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "group_vars").symlink_to(REPO / "group_vars")
    layouts = {**load_yaml_vars([REPO / "group_vars" / "sglang_servers.yml"])["sglang_layouts"], **LAYOUTS}
    ports = {instance: boxes.free_port() for instance in SLICES}
    hosts = {
        f"{box.name}-{instance}": {
            **base_host,
            **gpu_host.serving_vars(ports[instance]),
            "sglang_model_path": MODEL_PATH,
            "sglang_layouts": layouts,
            "sglang_instance": instance,
            "sglang_gpu_ids": gpus,
        }
        for instance, gpus in SLICES.items()
    }
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"sglang_servers": {"hosts": hosts}}, sort_keys=False))
    return Instances(box, path, ports)
