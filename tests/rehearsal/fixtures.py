"""The rehearsal box fixtures, loaded for every tier by tests/conftest.py (pytest_plugins)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.rehearsal import apt_repo
from tests.rehearsal import box as boxes

NEEDS = ("debootstrap", "systemd-nspawn", "dpkg-deb", "gpg", "ssh")


def box_support_missing() -> str | None:
    """Why this machine cannot run rehearsal boxes, or None."""
    if os.geteuid() != 0:
        return "rehearsal boxes need root (mount, chroot, systemd-nspawn)"
    missing = [tool for tool in NEEDS if shutil.which(tool) is None]
    return f"missing {', '.join(missing)}: run bin/setup" if missing else None


@pytest.fixture(scope="session")
def box_support() -> None:
    reason = box_support_missing()
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
