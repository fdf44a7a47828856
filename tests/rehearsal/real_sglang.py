"""The REAL sglang package from PyPI (no stand-in), installed once per version into a cached venv.

`pip install sglang==0.5.23` on a CPU-only machine takes minutes and ~11 GB with its CUDA libraries.
The wheels are downloaded once into a wheelhouse under the rehearsal cache (pip's own HTTP cache
does not keep them behind every proxy), and the venv is installed from it; a rerun on the same
machine fetches nothing. Rehearsal boxes install from the same wheelhouse, bound in read-only.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.rehearsal.box import CACHE

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
    if (target / "complete").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "complete").exists():
            return target
        if not registry_reachable():
            raise RegistryUnreachable("the package registry is unreachable: the real-SGLang tier cannot fetch sglang")
        with open(target.parent / f"{target.name}.log", "w") as out:
            argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--dest", str(target),
                    f"sglang=={version}"]  # fmt: skip
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pip download sglang=={version} failed; see {target.parent / (target.name + '.log')}")
        (target / "complete").write_text(version)
    return target


def registry_reachable(timeout: float = 10) -> bool:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    try:
        urllib.request.urlopen(f"{index}/sglang/", timeout=timeout).close()
    except OSError:
        return False
    return True


def install(version: str = VERSION, log: Path | None = None) -> Path:
    """The venv's python, installing sglang==VERSION first when it is not there yet."""
    target = venv_dir(version)
    python = target / "venv" / "bin" / "python"
    if (target / "complete").exists():
        return python
    target.mkdir(parents=True, exist_ok=True)
    with open(target / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second installer waits, then finds it complete
        if (target / "complete").exists():
            return python
        wheels = wheelhouse(version)
        shutil.rmtree(target / "venv", ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(target / "venv")], check=True)
        with open(log or target / "install.log", "w") as out:
            done = subprocess.run(
                [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--find-links",
                 str(wheels), f"sglang=={version}"],
                stdout=out, stderr=subprocess.STDOUT, check=False,
            )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pip install sglang=={version} failed; see {log or target / 'install.log'}")
        (target / "complete").write_text(version)
    return python


def help_text(python: Path) -> str:
    """`launch_server --help` of the real package (PYTHONHASHSEED=0: one choice list comes from a set)."""
    cached = python.parent.parent.parent / "help.txt"
    if cached.exists():
        return cached.read_text()
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run([str(python), "-m", "sglang.launch_server", "--help"], capture_output=True, text=True,
                          env=env, timeout=300, check=True)  # fmt: skip
    cached.write_text(done.stdout)
    return done.stdout
