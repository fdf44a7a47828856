"""The rehearsal box: a freshly booted Debian with real systemd and sshd, reached over real SSH.

A base rootfs is built once with debootstrap and cached under a directory
keyed by a hash of its recipe. Each box is an overlayfs over that base,
booted with systemd-nspawn on the host's network with sshd on its own port,
so several boxes can run at once. A box is always torn down by PID, even
when a test fails; `python -m tests.rehearsal down --all` sweeps leftovers.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

CACHE = Path(os.environ.get("REHEARSAL_CACHE", "/var/cache/sglang-rehearsal"))
RUNTIME = Path(os.environ.get("REHEARSAL_RUNTIME", "/var/tmp/sglang-rehearsal/boxes"))
SUITE = "bookworm"
PACKAGES = "systemd,systemd-sysv,dbus,openssh-server,python3,python3-venv,python3-apt,iproute2,ca-certificates,sudo,gpgv,curl"
BOX_USER = "rehearsal"


class BoxError(RuntimeError):
    pass


def debian_mirror() -> str:
    """The Debian mirror this machine's own apt sources name (the only one reachable here)."""
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] or words[:1] == ["deb"]:
                for word in words[1:]:
                    if word.startswith("http") and "security" not in word:
                        return word.rstrip("/")
    return "http://deb.debian.org/debian"


def recipe() -> dict[str, str]:
    return {"suite": SUITE, "variant": "minbase", "packages": PACKAGES, "version": "1"}


def base_dir() -> Path:
    digest = hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:16]
    return CACHE / f"base-{SUITE}-{digest}"


def built_once(target: Path, build: Callable[[], str]) -> Path:
    """Build `target` once per machine and mark it complete (the mark holds what build() returns).

    A concurrent builder waits on the lock, then finds it complete; an unmarked (interrupted) build
    is cleared and done again.
    """
    if (target / "complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "complete").exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            (target / "complete").write_text(build())
    return target


def build_base(log: Path | None = None) -> Path:
    """The cached base rootfs, built with debootstrap on first use (about a minute)."""
    base = base_dir()

    def debootstrap() -> str:
        rootfs = base / "rootfs"
        command = ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(rootfs), debian_mirror()]
        with open(log or base / "debootstrap.log", "w") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise BoxError(f"debootstrap failed ({done.returncode}); see {log or base / 'debootstrap.log'}")
        # No box should start these: each box gets its own host keys and machine id.
        for key in (rootfs / "etc" / "ssh").glob("ssh_host_*"):
            key.unlink()
        (rootfs / "etc" / "machine-id").write_text("")
        return json.dumps(recipe())

    return built_once(base, debootstrap) / "rootfs"


# Where free_port looks: below the kernel's ephemeral range (32768-60999 by default), above the registered services.
PORTS = range(20000, 32768)


_HANDED_OUT: set[int] = set()  # this process's ports so far: never handed out twice


def free_port() -> int:
    """A loopback port free now, outside the kernel's ephemeral range (net.ipv4.ip_local_port_range), never
    handed out before by this process nor by another pytest-xdist worker of the run.

    A port handed out here is bound later, by another process (a box's sshd, a stand-in server). Taken
    from the ephemeral range, an outgoing connection (ssh to a box, apt, pip) could take it as its local
    port in between, and the listener failed to bind: a box that never answered SSH beside a busy worker.
    Two picks in a row once gave a router the same port twice (its own and its metrics port), so this
    process remembers what it gave, and each worker picks from its own residue class of ports.
    """
    low, high = _ephemeral_range()
    share, shares = _worker_share()
    choices = [port for port in PORTS if not low <= port <= high and port % shares == share and port not in _HANDED_OUT]
    pick = secrets.SystemRandom()
    for _ in range(200):
        port = pick.choice(choices) if choices else 0
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = sock.getsockname()[1]
        _HANDED_OUT.add(port)
        return port
    raise BoxError(f"no free loopback port in {PORTS.start}-{PORTS.stop - 1} outside the ephemeral range {low}-{high}")


def _worker_share() -> tuple[int, int]:
    """(this worker's index, the number of workers) under pytest-xdist (gw0, gw1...), else (0, 1)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(worker[2:]) % int(count), int(count)
    return 0, 1


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


@dataclass
class Box:
    name: str
    directory: Path
    ssh_port: int
    key: Path
    pid: int = 0
    user: str = BOX_USER
    # The process that made the box and tears it down (None: a box for a human, `up`, kept until `down`);
    # its start time tells it from a later process that got the same PID.
    owner: int | None = None
    owner_started: int | None = None

    @property
    def known_hosts(self) -> Path:
        """The box's own host key, recorded when it was made: SSH checks it like any other host's."""
        return self.directory / "known_hosts"

    @property
    def root(self) -> Path:
        """The box's filesystem as seen from the host (the overlay mount)."""
        return self.directory / "merged"

    @property
    def ssh_mux(self) -> str:
        """One SSH connection per user, shared by the tests' commands (`%r`: the user), as Ansible shares its own:
        a new connection's handshake took 0.22 s a command, a shared one's 0.01."""
        return str(self.directory / "ssh-%r")

    def ssh_command(self, *command: str, user: str | None = None) -> list[str]:
        return [
            "ssh",
            "-p",
            str(self.ssh_port),
            "-i",
            str(self.key),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self.ssh_mux}",
            "-o",
            "ControlPersist=60",
            f"{user or self.user}@127.0.0.1",
            shlex.join(command),
        ]

    def close_ssh(self) -> None:
        """End the shared connections (the box is going)."""
        for mux in self.directory.glob("ssh-*"):
            subprocess.run(["ssh", "-o", f"ControlPath={mux}", "-O", "exit", "box"], capture_output=True, check=False, timeout=10)

    def run(
        self, *command: str, user: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run a command in the box over SSH (as the sudo user unless told)."""
        return subprocess.run(self.ssh_command(*command, user=user), capture_output=True, text=True, check=check, timeout=timeout)

    def inventory(self, group: str = "sglang_servers", host_vars: dict | None = None) -> dict:
        host = {
            "ansible_host": "127.0.0.1",
            "ansible_port": self.ssh_port,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={self.known_hosts}",
            "ansible_become": True,
            "ansible_python_interpreter": "/usr/bin/python3",
            **(host_vars or {}),
        }
        return {group: {"hosts": {self.name: host}}}

    def write_inventory(self, path: Path, **kwargs: object) -> Path:
        import yaml

        path.write_text(yaml.safe_dump(self.inventory(**kwargs), sort_keys=False))
        return path

    def save(self) -> None:
        (self.directory / "box.json").write_text(
            json.dumps({**asdict(self), "directory": str(self.directory), "key": str(self.key)})
        )


def _prepare(box: Box, rootfs: Path) -> None:
    d = box.directory
    for sub in ("upper", "work", "merged"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={rootfs},upperdir={d / 'upper'},workdir={d / 'work'}",
            str(box.root),
        ],
        check=True,
    )
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", box.name, "-f", str(box.key)], check=True)
    root = box.root
    (root / "etc" / "hostname").write_text(box.name + "\n")
    (root / "etc" / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {box.name}\n")
    (root / "etc" / "ssh" / "sshd_config.d" / "rehearsal.conf").write_text(
        f"Port {box.ssh_port}\nListenAddress 127.0.0.1\nPasswordAuthentication no\n"
    )
    # Root's Python keeps what it compiles of Ansible's module payloads (tests/rehearsal/zipimport_cache.py).
    site = root / "usr" / "lib" / "python3" / "dist-packages"
    shutil.copy(Path(__file__).with_name("zipimport_cache.py"), site / "rehearsal_zipimport_cache.py")
    (site / "rehearsal_zipimport_cache.pth").write_text("import rehearsal_zipimport_cache; rehearsal_zipimport_cache.install()\n")
    # The host's TLS interception CA, so apt and pip over HTTPS work inside the box.
    for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy(cert, root / "usr" / "local" / "share" / "ca-certificates" / cert.name)
    pub = box.key.with_suffix(".pub").read_text()
    script = f"""
        set -e
        ssh-keygen -A >/dev/null
        update-ca-certificates >/dev/null 2>&1 || true
        useradd --create-home --shell /bin/bash {box.user}
        echo '{box.user} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{box.user}
        chmod 0440 /etc/sudoers.d/{box.user}
        for home in /root /home/{box.user}; do
          install -d -m 0700 $home/.ssh
          echo '{pub.strip()}' > $home/.ssh/authorized_keys
          chmod 0600 $home/.ssh/authorized_keys
        done
        chown -R {box.user}: /home/{box.user}/.ssh
    """
    subprocess.run(["chroot", str(root), "/bin/sh", "-c", script], check=True, capture_output=True)
    host_keys = sorted((root / "etc" / "ssh").glob("ssh_host_*_key.pub"))
    box.known_hosts.write_text(
        "".join(f"[127.0.0.1]:{box.ssh_port} {' '.join(key.read_text().split()[:2])}\n" for key in host_keys)
    )


def _wait_for_ssh(box: Box, deadline: float, process: subprocess.Popen) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BoxError(f"systemd-nspawn exited with {process.returncode}; see {box.directory / 'console.log'}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            if box.run("true", check=False, timeout=5).returncode == 0:
                return
        time.sleep(0.2)
    console = box.directory / "console.log"
    tail = console.read_text(errors="replace").splitlines()[-15:] if console.exists() else []
    said = "\n".join(f"  {line}" for line in tail)  # the directory goes with the box: its console's end is kept here
    raise BoxError(f"no SSH on port {box.ssh_port} after boot; the box's console ended:\n{said}")


def boot(name: str | None = None, timeout: float = 60, binds: dict[str, str] | None = None, owned: bool = True) -> Box:
    """A fresh box, booted and answering SSH. Call `destroy` (or use `running_box`) to end it.

    `binds` maps host directories to paths in the box (e.g. a shared pip cache), bound read-write.
    An `owned` box belongs to this process: once the process is gone, `sweep` removes it.
    """
    rootfs = build_base()
    name = name or f"rehearsal-{secrets.token_hex(3)}"
    directory = RUNTIME / name
    if directory.exists():
        raise BoxError(f"a box named {name} already exists at {directory}; run `python -m tests.rehearsal down {name}`")
    directory.mkdir(parents=True)
    box = Box(name=name, directory=directory, ssh_port=free_port(), key=directory / "id_ed25519")
    if owned:
        box.owner, box.owner_started = os.getpid(), process_started(os.getpid())
    try:
        box.save()  # before the mount: a run killed from here on leaves a box that `sweep` finds
        _prepare(box, rootfs)
        console = open(directory / "console.log", "w")  # noqa: SIM115  (kept open for the box's life)
        process = subprocess.Popen(
            [
                "systemd-nspawn",
                "-b",
                "-D",
                str(box.root),
                "--register=no",
                "--keep-unit",
                "-M",
                name,
                "--resolv-conf=copy-host",
                "--console=read-only",
                *(f"--bind={host}:{inside}" for host, inside in (binds or {}).items()),
            ],
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        box.pid = process.pid
        box.save()
        _wait_for_ssh(box, time.monotonic() + timeout, process)
    except BaseException:
        destroy(box)
        raise
    return box


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _is_nspawn(pid: int) -> bool:
    """The PID is still the box's systemd-nspawn (a box swept long after its run may have a reused PID)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"systemd-nspawn")
    except OSError:
        return False


def destroy(box: Box, timeout: float = 20) -> None:
    """Shut the box down by PID (SIGTERM lets systemd stop cleanly), unmount, delete."""
    box.close_ssh()
    if box.pid and _alive(box.pid) and _is_nspawn(box.pid):
        os.kill(box.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(box.pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(box.pid, os.WNOHANG)
            time.sleep(0.1)
        if _alive(box.pid):
            os.killpg(box.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(box.pid, 0)
    if os.path.ismount(box.root):
        subprocess.run(["umount", str(box.root)], check=False)
        if os.path.ismount(box.root):
            subprocess.run(["umount", "-l", str(box.root)], check=False)
    shutil.rmtree(box.directory, ignore_errors=True)


def process_started(pid: int) -> int | None:
    """When the process started (clock ticks since boot, /proc/PID/stat field 22); None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def orphaned(box: Box) -> bool:
    """The box was made by a process that is gone (killed before it could tear the box down)."""
    return box.owner is not None and process_started(box.owner) != box.owner_started


def sweep() -> list[Box]:
    """Destroy the boxes whose owner is gone and return them; a box whose owner lives, or a human's, stays."""
    swept = []
    for name in all_boxes():
        with contextlib.suppress(FileNotFoundError):  # another sweep, or its owner, got there first
            box = load(name)
            if orphaned(box):
                destroy(box)
                swept.append(box)
    return swept


def load(name: str) -> Box:
    data = json.loads((RUNTIME / name / "box.json").read_text())
    return Box(**{**data, "directory": Path(data["directory"]), "key": Path(data["key"])})


def all_boxes() -> list[str]:
    return sorted(p.name for p in RUNTIME.glob("*") if (p / "box.json").exists()) if RUNTIME.exists() else []


@contextlib.contextmanager
def running_box(name: str | None = None, binds: dict[str, str] | None = None) -> Iterator[Box]:
    box = boot(name, binds=binds)
    try:
        yield box
    finally:
        destroy(box)
