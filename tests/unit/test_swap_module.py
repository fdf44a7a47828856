"""The host-side swap (plugins/modules/sglang_swap.py) when the disk refuses a write: a scripted systemd, a full disk.

The box tests (tests/integration/test_swap_faults.py) kill the controller; here the write of the record or of
the unit file fails with ENOSPC, and the swap must still end with one layout serving and the old record whole.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.host_modules import host_module


@pytest.fixture
def swap_module(monkeypatch) -> ModuleType:
    """sglang_swap.py with its shared code under the name Ansible gives it (ansible.module_utils.sglang_host)."""
    module = host_module("sglang_swap", monkeypatch)
    # Every start is healthy at once: the faults here are the disk's.
    monkeypatch.setattr(module, "wait_healthy", lambda *_: ("healthy", 200, {"ActiveState": "active"}, 0))
    return module


class ScriptedHost:
    """What AnsibleModule gives the swap: its parameters, and a systemctl that records each call and succeeds."""

    def __init__(self, params: dict) -> None:
        self.params = params
        self.calls: list[str] = []

    def run_command(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(" ".join(argv[:3]))
        return 0, "", ""

    def get_bin_path(self, name: str) -> None:
        return None


def params(tmp_path: Path) -> dict:
    unit_path = tmp_path / "sglang-k26-tp8.service"
    unit_path.write_text("[Service]\nExecStart=new\n")
    return {
        "unit": "sglang-k26-tp8.service",
        "unit_path": str(unit_path),
        "others": ["sglang-k26-ep8.service"],
        "restart": False,
        "previous": "sglang-k26-ep8.service",
        "previous_file": "[Service]\nExecStart=old\n",
        "record": {"active_layout": "tp8"},
        "previous_record": {"active_layout": "ep8"},
        "fact_path": str(tmp_path / "sglang_service.fact"),
        "url": "http://127.0.0.1:9/health_generate",
        "gpus": "",
        "gpu_free_timeout": 1,
        "health_timeout": 1,
        "interval": 0.1,
        "journal_lines": 10,
    }


def full_disk_at(module: ModuleType, monkeypatch, path: str) -> None:
    real = module.write_atomically

    def write(target: str, content: str, mode: int) -> None:
        if target == path:
            raise OSError(errno.ENOSPC, "No space left on device", target)
        real(target, content, mode)

    monkeypatch.setattr(module, "write_atomically", write)


def run_swap(module: ModuleType, host: ScriptedHost, tmp_path: Path) -> dict:
    lock = (tmp_path / "swap.lock").open("w+")
    try:
        return module.Swap(host, lock.fileno()).run()
    finally:
        lock.close()


def test_a_record_the_disk_refuses_rolls_back_and_leaves_the_old_record_whole(swap_module, monkeypatch, tmp_path):
    host = ScriptedHost(params(tmp_path))
    fact = Path(host.params["fact_path"])
    fact.write_text('{"active_layout": "ep8"}\n')
    full_disk_at(swap_module, monkeypatch, str(fact))
    result = run_swap(swap_module, host, tmp_path)
    assert result["outcome"] == "rolled_back"
    assert "could not write the record" in result["failure"]["msg"] and "No space left" in result["failure"]["msg"]
    assert "could not write the record" in result["rollback"]["record_error"]
    assert fact.read_text() == '{"active_layout": "ep8"}\n'  # what serves again: the record from before
    # tp8 was stopped and disabled, ep8 started and enabled again, after the restored unit file was read.
    order = host.calls
    assert order.index("systemctl stop sglang-k26-tp8.service") < order.index("systemctl start sglang-k26-ep8.service")
    changes = [call for call in order if not call.startswith("journalctl")]  # reads of where each start went
    assert "systemctl disable sglang-k26-tp8.service" in order and changes[-1] == "systemctl enable sglang-k26-ep8.service"
    assert Path(host.params["unit_path"]).read_text() == "[Service]\nExecStart=old\n"


def test_a_unit_file_the_disk_refuses_to_restore_is_a_failed_rollback_that_says_so(swap_module, monkeypatch, tmp_path):
    host = ScriptedHost(params(tmp_path))
    full_disk_at(swap_module, monkeypatch, host.params["fact_path"])
    full_disk_at(swap_module, monkeypatch, host.params["unit_path"])
    result = run_swap(swap_module, host, tmp_path)
    assert result["outcome"] == "rollback_failed"
    assert result["rollback"]["error"].startswith(f"could not restore the unit file {host.params['unit_path']}")
    assert "systemctl start sglang-k26-ep8.service" not in host.calls  # not started on a unit file it never got back
    assert not Path(host.params["fact_path"]).exists()


def test_a_reader_looking_as_the_swap_takes_its_lock_does_not_pass_for_a_running_swap(swap_module, tmp_path):
    """status and sglang_units hold a shared lock for a moment; the swap waits that out, and only a lock held on
    (another swap's) refuses it."""
    lock = tmp_path / "swap.lock"
    swap, reader = os.open(lock, os.O_RDWR | os.O_CREAT), os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(reader, fcntl.LOCK_SH | fcntl.LOCK_NB)
        threading.Timer(0.2, fcntl.flock, (reader, fcntl.LOCK_UN)).start()
        assert swap_module.lock_exclusively(swap, wait=5.0)
        with pytest.raises(BlockingIOError):  # it holds the lock now: a reader is told a swap runs
            fcntl.flock(reader, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(swap, fcntl.LOCK_UN)
        fcntl.flock(reader, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another swap, which keeps it
        assert not swap_module.lock_exclusively(swap, wait=0.2)
    finally:
        os.close(swap)
        os.close(reader)
