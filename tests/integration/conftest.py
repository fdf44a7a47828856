"""Fixtures for tests against the rehearsal box and the stand-ins."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.rehearsal import apt_repo, gpu_host, standin
from tests.rehearsal import box as boxes
from tests.rehearsal.playbook import PlaybookRun, run_playbook

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


@dataclass
class ProvisionedBox:
    box: boxes.Box
    inventory: Path
    first_run: PlaybookRun
    port: int

    def playbook(self, playbook: str, *options: str, extra_vars: dict | None = None) -> PlaybookRun:
        return run_playbook(playbook, self.inventory, extra_vars, *options)


def gpu_box_inventory(box: boxes.Box, directory: Path, repo: apt_repo.AptRepo, **host_vars: object) -> Path:
    return gpu_host.prepare(box, directory, repo.base_url, **host_vars)


@pytest.fixture(scope="session")
def provisioned(box_support, cuda_repo, tmp_path_factory) -> Iterator[ProvisionedBox]:
    """One box provisioned by playbooks/provision.yml, shared by the tests that only need it provisioned."""
    with boxes.running_box() as box:
        port = boxes.free_port()
        inventory = gpu_box_inventory(box, tmp_path_factory.mktemp("provisioned"), cuda_repo, **gpu_host.serving_vars(port))
        first = run_playbook("playbooks/provision.yml", inventory)
        assert first.returncode == 0, first.output[-4000:]
        yield ProvisionedBox(box, inventory, first, port)
