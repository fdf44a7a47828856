"""Fixtures for tests against the rehearsal box and the stand-ins."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.rehearsal import apt_repo, standin
from tests.rehearsal import box as boxes
from tests.rehearsal.playbook import PlaybookRun, run_playbook, write_inventory

NEEDS = ("debootstrap", "systemd-nspawn", "dpkg-deb", "gpg", "ssh")


def _box_support() -> str | None:
    if os.geteuid() != 0:
        return "rehearsal boxes need root (mount, chroot, systemd-nspawn)"
    missing = [tool for tool in NEEDS if shutil.which(tool) is None]
    return f"missing {', '.join(missing)}: run bin/setup" if missing else None


@pytest.fixture(scope="session")
def box_support() -> None:
    reason = _box_support()
    if reason:
        pytest.skip(reason)
    boxes.build_base()


@pytest.fixture
def box(box_support) -> Iterator[boxes.Box]:
    with boxes.running_box() as fresh:
        yield fresh


@pytest.fixture(scope="session")
def cuda_repo(box_support, tmp_path_factory) -> Iterator[apt_repo.AptRepo]:
    with apt_repo.served(tmp_path_factory.mktemp("cuda-repo")) as repo:
        yield repo


@pytest.fixture(scope="session")
def wheelhouse() -> str:
    return str(standin.wheelhouse())


REPO = Path(__file__).resolve().parents[2]
KIMI_CONFIG = REPO / "examples" / "models" / "kimi-k2.6" / "config.json"
# The simulated GPU host every provisioned box stands in for: the field notes' 8 x ~95 GiB GPUs serving a
# ~1T INT4 model (553 GiB of weights), EP8 at 65 tok/s for one request (the field notes' C=1 figure).
GPU_HOST = {"gpu_count": 8, "gpu_memory_gib": 94.97, "driver_version": "580.95.05", "weights_gib": 553,
            "load_seconds": 2, "itl_ms": {"default": 38.0, "tp8-ep8-pp1-dp1": 15.4}}  # fmt: skip
MODEL_PATH = "/srv/models/Kimi-K2.6"


@dataclass
class ProvisionedBox:
    box: boxes.Box
    inventory: Path
    first_run: PlaybookRun
    port: int

    def playbook(self, playbook: str, *options: str, extra_vars: dict | None = None) -> PlaybookRun:
        return run_playbook(playbook, self.inventory, extra_vars, *options)


def gpu_box_inventory(box: boxes.Box, directory: Path, repo: apt_repo.AptRepo, **host_vars: object) -> Path:
    """A box made to look like a GPU host at its edges, with an inventory pointing provision at the stand-ins."""
    standin.make_gpu_host(box.root, **GPU_HOST)
    return write_inventory(box, directory, **{**standin.provision_vars(repo.base_url), **host_vars})


@pytest.fixture(scope="session")
def provisioned(box_support, cuda_repo, tmp_path_factory) -> Iterator[ProvisionedBox]:
    """One box provisioned by playbooks/provision.yml, shared by the tests that only need it provisioned."""
    with boxes.running_box() as box:
        port = boxes.free_port()  # boxes share the host's network: each server needs its own port
        serving = {"sglang_model_path": MODEL_PATH, "sglang_port": port, "sglang_bind_address": "127.0.0.1",
                   "sglang_service_health_interval": 0.5, "sglang_service_health_timeout": 60}  # fmt: skip
        inventory = gpu_box_inventory(box, tmp_path_factory.mktemp("provisioned"), cuda_repo, **serving)
        model = box.root / MODEL_PATH.lstrip("/")
        model.mkdir(parents=True)
        shutil.copy(KIMI_CONFIG, model / "config.json")
        first = run_playbook("playbooks/provision.yml", inventory)
        assert first.returncode == 0, first.output[-4000:]
        yield ProvisionedBox(box, inventory, first, port)
