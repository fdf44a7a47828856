"""The rehearsal box itself: boots clean, never collides, always goes away; the stand-ins install on it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.rehearsal import box as boxes
from tests.rehearsal.box import BoxError
from tests.rehearsal.standin import wait_http, write_simulation


def gone(box: boxes.Box) -> bool:
    alive = subprocess.run(["kill", "-0", str(box.pid)], capture_output=True, check=False).returncode == 0
    return not alive and not os.path.ismount(box.root) and not box.directory.exists()


def test_box_boots_with_systemd_and_no_failed_units(box):
    state = box.run("systemctl", "is-system-running", "--wait", check=False, timeout=60).stdout.strip()
    assert state == "running", box.run("systemctl", "--failed", check=False).stdout
    assert box.run("systemctl", "--failed", "--no-legend").stdout.strip() == ""
    assert box.run("sudo", "-n", "id", "-u").stdout.strip() == "0"
    assert box.run("hostname").stdout.strip() == box.name
    assert box.run("python3", "-c", "import sys; print(sys.version_info >= (3, 11))").stdout.strip() == "True"
    assert box.run("id", "-un", user="root").stdout.strip() == "root"


def test_a_cached_box_boots_in_seconds_and_several_run_at_once(box_support):
    started = time.monotonic()
    with boxes.running_box() as first, boxes.running_box() as second:
        boot_seconds = (time.monotonic() - started) / 2
        assert first.name != second.name and first.ssh_port != second.ssh_port
        assert first.run("hostname").stdout.strip() == first.name
        assert second.run("hostname").stdout.strip() == second.name
        first.run("sudo", "touch", "/etc/only-in-first")
        assert second.run("test", "-e", "/etc/only-in-first", check=False).returncode == 1
    assert gone(first) and gone(second)
    assert boot_seconds < 20, f"a box took {boot_seconds:.1f} s to boot"


def test_a_failing_test_still_tears_the_box_down(box_support):
    with pytest.raises(RuntimeError, match="test failed"), boxes.running_box() as doomed:
        raise RuntimeError("test failed")
    assert gone(doomed)


def test_a_duplicate_name_is_refused_without_harm(box):
    with pytest.raises(BoxError, match="already exists"):
        boxes.boot(box.name)
    assert box.run("true").returncode == 0


def test_stand_in_cuda_repo_installs_through_the_keyring(box, cuda_repo):
    keyring = f"{cuda_repo.url}cuda-keyring_1.1-1_all.deb"
    box.run("curl", "-fsSo", "/tmp/cuda-keyring.deb", keyring)
    box.run("sudo", "dpkg", "-i", "/tmp/cuda-keyring.deb")
    sources = box.run("cat", f"/etc/apt/sources.list.d/cuda-{cuda_repo.distro}-{cuda_repo.arch}.list").stdout
    assert sources.strip() == f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {cuda_repo.url} /"
    listing = f"/etc/apt/sources.list.d/cuda-{cuda_repo.distro}-{cuda_repo.arch}.list"
    only_cuda = ["-o", f"Dir::Etc::sourcelist={listing}", "-o", "Dir::Etc::sourceparts=-"]
    update = box.run("sudo", "apt-get", *only_cuda, "update", check=False)
    assert update.returncode == 0 and "NO_PUBKEY" not in update.stderr, update.stderr
    box.run("sudo", "DEBIAN_FRONTEND=noninteractive", "apt-get", *only_cuda, "install", "-y", "cuda-toolkit-13-0", timeout=300)
    assert "release 13.0" in box.run("/usr/local/cuda-13.0/bin/nvcc", "--version").stdout


def test_stand_in_sglang_installs_from_the_wheelhouse_and_serves_under_systemd(box, wheelhouse):
    # The box shares the host's network, so the wheelhouse is copied in, as an offline mirror would be.
    subprocess.run(["cp", "-r", wheelhouse, str(box.root / "opt" / "wheelhouse")], check=True)
    box.run("sudo", "python3", "-m", "venv", "/opt/sglang")
    box.run(
        "sudo",
        "/opt/sglang/bin/pip",
        "install",
        "-q",
        "--no-index",
        "--find-links",
        "/opt/wheelhouse",
        "sglang==0.5.23",
        timeout=300,
    )
    version = box.run("/opt/sglang/bin/python", "-c", "import sglang; print(sglang.__version__)").stdout.strip()
    assert version == "0.5.23+standin"
    assert box.run("/opt/sglang/bin/python", "-m", "sglang.launch_server", "--help").stdout.count("--ep-size") >= 1
    box.run("sudo", "mkdir", "-p", "/models/tiny")
    box.run("sudo", "sh", "-c", "echo '{}' > /models/tiny/config.json")
    write_simulation(box.root / "etc" / "sglang-standin.json", load_seconds=1.0)
    port = boxes.free_port()
    launch = ["/opt/sglang/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/tiny", "--host", "127.0.0.1"]
    box.run("sudo", "systemd-run", "--unit", "standin", *launch, "--port", str(port), "--tp-size", "8", "--ep-size", "8")
    assert wait_http(f"http://127.0.0.1:{port}/health_generate", 30) == 200
    journal = box.run("sudo", "journalctl", "-u", "standin", "--no-pager").stdout
    assert "The server is fired up and ready to roll!" in journal
    box.run("sudo", "systemctl", "stop", "standin")


def test_ansible_reaches_the_box_over_ssh_with_become(box, tmp_path):
    inventory = box.write_inventory(tmp_path / "inventory.yml")
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["ansible", "sglang_servers", "-i", str(inventory), "-m", "ansible.builtin.command", "-a", "id -u"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{box.name} | CHANGED | rc=0" in done.stdout and done.stdout.strip().endswith("0")
