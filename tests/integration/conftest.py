"""Fixtures for tests against the rehearsal box and the stand-ins."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.rehearsal import box as boxes
from tests.rehearsal import gpu_host, gpu_pair, instances, standin
from tests.rehearsal.playbook import PlaybookRun, run_playbook


@pytest.fixture
def private_tmp(tmp_path) -> Path:
    """A TMPDIR of the test's own, for a run's leftovers: other runs on the machine come and go in /tmp."""
    path = tmp_path / "tmp"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def wheelhouse() -> str:
    return str(standin.wheelhouse())


@dataclass
class ProvisionedBox:
    box: boxes.Box
    inventory: Path
    first_run: PlaybookRun
    port: int

    def playbook(self, playbook: str, *options: str, extra_vars: dict | None = None) -> PlaybookRun:
        return run_playbook(playbook, self.inventory, extra_vars, *options)


@pytest.fixture(scope="session")
def provisioned(box_support, cuda_repo, tmp_path_factory) -> Iterator[ProvisionedBox]:
    """One box provisioned by playbooks/provision.yml, shared by the tests that only need it provisioned."""
    with boxes.running_box() as box:
        port = boxes.free_port()
        inventory = gpu_host.prepare(
            box, tmp_path_factory.mktemp("provisioned"), cuda_repo.base_url, **gpu_host.serving_vars(port)
        )
        first = run_playbook("playbooks/provision.yml", inventory)
        assert first.returncode == 0, first.output[-4000:]
        yield ProvisionedBox(box, inventory, first, port)


@pytest.fixture(scope="session")
def gpu_pair_boxes(box_support, cuda_repo, tmp_path_factory) -> Iterator[gpu_pair.Pair]:
    """Two boxes provisioned by playbooks/provision.yml in one inventory (tests/rehearsal/gpu_pair.py)."""
    with boxes.running_box() as a, boxes.running_box() as b:
        ports = {a.name: boxes.free_port(), b.name: boxes.free_port()}
        dist = boxes.free_port()
        inventory = gpu_pair.write_inventory(a, b, tmp_path_factory.mktemp("pair"), cuda_repo.base_url, ports, dist)
        provisioned = run_playbook("playbooks/provision.yml", inventory)
        assert provisioned.returncode == 0, provisioned.output[-4000:]
        yield gpu_pair.Pair(a, b, inventory, ports, dist)


@pytest.fixture(scope="module")
def two_instances(provisioned, tmp_path_factory) -> Iterator[instances.Instances]:
    """Instances r0 (GPUs 0-3) and r1 (GPUs 4-7) on the shared provisioned box (tests/rehearsal/instances.py).

    The box's whole-machine layouts are stopped first (a server without an instance owns every GPU, so the
    instances' swap would rightly refuse them) and the instances are stopped at the end of the module, so
    that the next tests on the box find its GPUs free.
    """
    box = provisioned.box
    provisioned.playbook("playbooks/stop.yml").succeeded()
    base = yaml.safe_load(provisioned.inventory.read_text())["sglang_servers"]["hosts"][box.name]
    both = instances.prepare(box, tmp_path_factory.mktemp("instances"), base)
    yield both
    run_playbook("playbooks/stop.yml", both.inventory).succeeded()
