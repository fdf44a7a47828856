"""STAND-IN for NVIDIA's CUDA apt repository, served on loopback during tests.

It holds small packages built at test time with dpkg-deb under the real names
the cuda_toolkit role installs, laid out like NVIDIA's repo
(<base>/<distro>/<arch>/, a flat repo signed with a key the stand-in
cuda-keyring ships):
- cuda-keyring: drops /usr/share/keyrings/cuda-archive-keyring.gpg and
  /etc/apt/sources.list.d/cuda-<distro>-<arch>.list, as NVIDIA's does;
- cuda-toolkit-13-0: /usr/local/cuda-13.0/bin/nvcc answering --version with
  a 13.0 release line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.rehearsal.box import free_port
from tests.rehearsal.stopping import die_with_parent

NVCC_VERSION = textwrap.dedent("""\
    nvcc: NVIDIA (R) Cuda compiler driver
    Copyright (c) 2005-2025 NVIDIA Corporation
    Built on Wed_Aug_20_01:58:59_PM_PDT_2025
    Cuda compilation tools, release 13.0, V13.0.88
    Build cuda_13.0.r13.0/compiler.36424714_0
""")


@dataclass(frozen=True)
class AptRepo:
    root: Path  # served directory
    base_url: str  # e.g. http://127.0.0.1:PORT (the role's repo base URL variable)
    distro: str
    arch: str

    @property
    def url(self) -> str:
        return f"{self.base_url}/{self.distro}/{self.arch}/"


def _deb(work: Path, name: str, version: str, files: dict[str, tuple[str | bytes, int]], description: str) -> Path:
    tree = work / f"{name}_{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: rehearsal <rehearsal@localhost>\n"
        f"Description: STAND-IN {description} (rehearsal tests only)\n"
    )
    for path, (content, mode) in files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
        target.chmod(mode)
    out = work / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(out)], check=True, capture_output=True)
    return out


def _gpg(home: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "", *args],
        input=data,
        capture_output=True,
        check=True,
    ).stdout


def _release(directory: Path) -> str:
    lines = ["Origin: rehearsal-cuda-standin", "Label: rehearsal-cuda-standin", "Suite: ./", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (directory / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def build(root: Path, base_url: str, distro: str = "debian12", arch: str = "x86_64") -> AptRepo:
    """Build the signed stand-in repo under `root` for packages served at `base_url`."""
    repo = AptRepo(root=root, base_url=base_url.rstrip("/"), distro=distro, arch=arch)
    (root / distro / arch).mkdir(parents=True, exist_ok=True)
    # gpg-agent's socket goes in the key's home: under a deep TMPDIR (a test's own) its path would pass the
    # 108-byte limit of a socket's name, so the home is short, and the agent is stopped once the repo is signed.
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(prefix="gpg-", dir="/tmp") as keys:
        home = Path(keys) / "gnupg"
        home.mkdir(mode=0o700)
        try:
            _signed(repo, root, Path(tmp), home, distro, arch)
        finally:
            subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
    return repo


def _signed(repo: AptRepo, root: Path, tmp: Path, home: Path, distro: str, arch: str) -> None:
    """The two packages, the index and its signature, made with a key generated in `home`."""
    target = root / distro / arch
    _gpg(home, "--quick-gen-key", "Rehearsal CUDA stand-in repo", "ed25519", "sign", "never")
    keyring = _gpg(home, "--export")
    sources = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {repo.url} /\n"
    _deb(
        tmp,
        "cuda-keyring",
        "1.1-1",
        {
            "/usr/share/keyrings/cuda-archive-keyring.gpg": (keyring, 0o644),
            f"/etc/apt/sources.list.d/cuda-{distro}-{arch}.list": (sources, 0o644),
        },
        "NVIDIA CUDA repository keyring",
    ).rename(target / "cuda-keyring_1.1-1_all.deb")
    nvcc = "#!/bin/sh\n# STAND-IN nvcc: answers --version only\ncat <<'EOF'\n" + NVCC_VERSION + "EOF\n"
    _deb(
        tmp,
        "cuda-toolkit-13-0",
        "13.0.0-1",
        {
            "/usr/local/cuda-13.0/bin/nvcc": (nvcc, 0o755),
            "/usr/local/cuda-13.0/version.json": ('{"cuda": {"name": "CUDA SDK", "version": "13.0.0"}}\n', 0o644),
            "/usr/local/cuda-13.0/lib64/.keep": ("", 0o644),
        },
        "CUDA Toolkit 13.0",
    ).rename(target / "cuda-toolkit-13-0_13.0.0-1_all.deb")
    packages = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=target, capture_output=True, check=True
    ).stdout
    (target / "Packages").write_bytes(packages)
    subprocess.run(["gzip", "-kf9n", "Packages"], cwd=target, check=True)
    release = _release(target).encode()
    (target / "Release").write_bytes(release)
    (target / "InRelease").write_bytes(_gpg(home, "--clearsign", data=release))


@contextlib.contextmanager
def served(root: Path, distro: str = "debian12", arch: str = "x86_64") -> Iterator[AptRepo]:
    """Build the repo and serve it over HTTP on loopback for the duration."""
    port = free_port()
    repo = build(root, f"http://127.0.0.1:{port}", distro, arch)
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(root), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=die_with_parent,  # a test process killed before its teardown once left it serving
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(repo.url + "Release", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        yield repo
    finally:
        server.terminate()
        server.wait(timeout=10)
