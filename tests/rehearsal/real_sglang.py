"""The REAL sglang package from PyPI (no stand-in), installed once per version into a cached venv.

`pip install sglang==0.5.23` on a CPU-only machine takes minutes and ~11 GB with its CUDA libraries.
The wheels are downloaded once into a wheelhouse under the rehearsal cache (pip's own HTTP cache
does not keep them behind every proxy), and the venv is installed from it; a rerun on the same
machine fetches nothing. Rehearsal boxes install from the same wheelhouse, bound in read-only.

This venv is the tests' own, so uv installs it: 26 s where pip took 194 s from the same wheelhouse
(the same 206 packages at the same versions), at the head of every fresh run's longest module. The
boxes' venvs are the provision role's, installed by uv too (its default, `sglang_venv_installer`), from
this wheelhouse and `uv_wheelhouse()`'s.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.rehearsal.box import CACHE, built_once

VERSION = "0.5.23"
MODULE = "tests.rehearsal.real_sglang"  # `python -m` this: the prefetch


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


def uv_wheelhouse() -> Path:
    """The uv wheel the venv role installs sglang with, for the real tier's boxes (offline, as its sglang)."""
    from tests.rehearsal.standin import uv_requirement

    requirement = uv_requirement()
    target = CACHE / f"{requirement.replace('==', '-')}-wheels"

    def download() -> str:
        argv = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:"]
        subprocess.run([*argv, "--no-deps", "--dest", str(target), requirement], check=True)
        return requirement

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
            "--compile-bytecode",  # as pip does, and the role: a server start then compiles nothing
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
    partial = cached.with_name(f".{cached.name}.{os.getpid()}")  # whole or not there: a prefetch may be stopped
    partial.write_text(done.stdout)
    partial.replace(cached)
    return done.stdout


TIER_MARKS = ("real_sglang", "box")  # what tests/conftest.py marks every test of the tier with


def among(tier: Path, paths: list[Path]) -> bool:
    """Whether a run over these paths reaches the tier: the tier itself, a folder above it, or a file in it."""
    return any(path == tier or path in tier.parents or tier in path.parents for path in paths)


def prefetched() -> bool:
    """Whether the venv and its --help are already there (nothing for a prefetch to do)."""
    return (venv_dir() / "complete").exists() and (venv_dir() / "help.txt").exists()


def start_prefetch(log: Path) -> subprocess.Popen:
    """`python -m tests.rehearsal.real_sglang` in the background, at the lowest CPU and disk priority: the
    wheels, the venv and its --help made ready while the run's first modules go, so that the real tier's
    first test finds them (or waits on their lock, `built_once`, for what is left). In its own process
    group, which `stop_prefetch` ends; it ends with its starter too (`die_with_parent`)."""
    from tests.rehearsal.stopping import die_with_parent

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        return subprocess.Popen(
            [*(["ionice", "-c", "3"] if shutil.which("ionice") else []), "nice", "-n", "19", sys.executable, "-m", MODULE],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
            cwd=Path(__file__).resolve().parents[2],
        )


def stop_prefetch(process: subprocess.Popen, wait_s: float = 10) -> None:
    """Its whole group stopped (pip, uv, the --help's Python); an unfinished build is redone next time."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(wait_s)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _end_group(signum: int, frame: object) -> None:
    if os.getpgid(0) == os.getpid():  # started by start_prefetch: the group is the prefetch's own
        os.killpg(0, signal.SIGKILL)  # this process and what it started: none may outlive the prefetch
    raise SystemExit(128 + signum)


def main() -> int:
    """The prefetch: install() and help_text(); an unreachable registry is the tier's skip, not an error here."""
    signal.signal(signal.SIGTERM, _end_group)
    try:
        help_text(install())
        uv_wheelhouse()
    except RegistryUnreachable as exc:
        print(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
