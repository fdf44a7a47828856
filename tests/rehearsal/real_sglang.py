"""The REAL sglang package from PyPI (no stand-in), installed once per version into a cached venv.

`pip install sglang==0.5.23` on a CPU-only machine takes minutes and ~11 GB with its CUDA libraries.
The wheels are downloaded once into a wheelhouse under the rehearsal cache (pip's own HTTP cache
does not keep them behind every proxy), and the venv is installed from it; a rerun on the same
machine fetches nothing. Rehearsal boxes install from the same wheelhouse, bound in read-only.

This venv is the tests' own, so uv installs it: 26 s where pip took 194 s from the same wheelhouse
(the same 206 packages at the same versions), at the head of every fresh run's longest module. The
boxes' venvs are the provision role's, installed by pip as on a real host.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.rehearsal.box import CACHE, built_once

VERSION = "0.5.23"


class RegistryUnreachable(RuntimeError):
    """PyPI cannot be reached from here: the only reason the real-SGLang tier may skip."""


def venv_dir(version: str = VERSION) -> Path:
    return CACHE / f"real-sglang-{version}"


def wheelhouse_dir(version: str = VERSION) -> Path:
    return CACHE / f"real-sglang-wheels-{version}"


def wheelhouse(version: str = VERSION) -> Path:
    """Every wheel sglang==VERSION needs on this platform, downloaded once."""
    target = wheelhouse_dir(version)

    def download() -> str:
        if not registry_reachable():
            raise RegistryUnreachable("the package registry is unreachable: the real-SGLang tier cannot fetch sglang")
        log = target.parent / f"{target.name}.log"
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "--dest",
            str(target),
            f"sglang=={version}",
        ]
        with open(log, "w") as out:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pip download sglang=={version} failed; see {log}")
        return version

    return built_once(target, download)


def registry_reachable(timeout: float = 10) -> bool:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    try:
        urllib.request.urlopen(f"{index}/sglang/", timeout=timeout).close()
    except OSError:
        return False
    return True


def install(version: str = VERSION) -> Path:
    """The venv's python, installing sglang==VERSION from the wheelhouse first when it is not there yet."""
    target = venv_dir(version)

    def create() -> str:
        wheels = wheelhouse(version)
        subprocess.run([sys.executable, "-m", "venv", str(target / "venv")], check=True)
        argv = [
            str(Path(sys.executable).parent / "uv"),  # requirements-dev.txt pins it
            "pip",
            "install",
            "--python",
            str(target / "venv" / "bin" / "python"),
            "--cache-dir",
            str(target / "uv-cache"),  # beside the venv: hard links, and emptied with the rehearsal cache
            "--no-index",
            "--find-links",
            str(wheels),
            f"sglang=={version}",
        ]
        with open(target / "install.log", "w") as out:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pip install sglang=={version} failed; see {target / 'install.log'}")
        return version

    return built_once(target, create) / "venv" / "bin" / "python"


def help_text(python: Path) -> str:
    """`launch_server --help` of the real package (PYTHONHASHSEED=0: one choice list comes from a set)."""
    cached = python.parent.parent.parent / "help.txt"
    if cached.exists():
        return cached.read_text()
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [str(python), "-m", "sglang.launch_server", "--help"], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    cached.write_text(done.stdout)
    return done.stdout
