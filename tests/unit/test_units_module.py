"""plugins/modules/sglang_units.py: the units found and their states, what find, systemctl show, the swap's probe
and two slurps gave the swap (the box tiers run it on every deploy, status and stop)."""

from __future__ import annotations

import fcntl
import json
import os
from types import ModuleType

import pytest

from tests.unit.host_modules import host_module

PATTERN = r"^sglang-[a-z0-9-]+\.service$"  # sglang_layout.instances.unit_pattern("")


@pytest.fixture
def units_module(monkeypatch) -> ModuleType:
    """sglang_units.py with its shared code under the name Ansible gives it (ansible.module_utils.sglang_host)."""
    return host_module("sglang_units", monkeypatch)


def test_only_this_servers_unit_files_with_the_projects_mark_are_found(units_module, tmp_path):
    (tmp_path / "sglang-k26-ep8.service").write_text("[Unit]\nX-SGLang-Layout=ep8\n")
    (tmp_path / "sglang-k26-tp8.service").write_text("[Unit]\nX-SGLang-Layout=tp8\n")
    (tmp_path / "sglang-by-hand.service").write_text("[Unit]\nDescription=not ours\n")  # no mark
    (tmp_path / "sglang-k26-ep8.a.service").write_text("X-SGLang-Layout=ep8\n")  # instance a's
    (tmp_path / "sglang-link.service").symlink_to(tmp_path / "sglang-k26-ep8.service")  # a link, as find skips it
    (tmp_path / "sglang-dir.service").mkdir()
    found = units_module.find_units(str(tmp_path), PATTERN, "^X-SGLang-Layout=")
    assert found == ["sglang-k26-ep8.service", "sglang-k26-tp8.service"]
    assert units_module.find_units(str(tmp_path / "absent"), PATTERN, "^X-SGLang-Layout=") == []


def test_the_states_are_read_from_one_systemctl_show_over_several_units(units_module):
    shown = (
        "Id=sglang-k26-ep8.service\nSubState=running\nUnitFileState=enabled\n\n"
        "Id=sglang-k26-tp8.service\nSubState=dead\nUnitFileState=disabled\n\n"
        "SubState=dead\n"  # no Id: not a unit systemd knows by that name
    )
    assert units_module.read_states(shown) == {
        "sglang-k26-ep8.service": {"Id": "sglang-k26-ep8.service", "SubState": "running", "UnitFileState": "enabled"},
        "sglang-k26-tp8.service": {"Id": "sglang-k26-tp8.service", "SubState": "dead", "UnitFileState": "disabled"},
    }
    assert units_module.read_states("") == {}


class Exited(Exception):
    pass


def run_main(units_module, monkeypatch, params: dict, shown: str = "") -> dict:
    """main() as Ansible runs it, with systemctl answering `shown`; its exit_json or fail_json answer."""
    answers: dict = {}

    class FakeModule:
        def __init__(self, argument_spec: dict, supports_check_mode: bool) -> None:
            self.params = {name: params.get(name, spec.get("default")) for name, spec in argument_spec.items()}

        def run_command(self, argv: list[str]) -> tuple[int, str, str]:
            answers["argv"] = argv
            return 0, shown, ""

        def exit_json(self, **result: object) -> None:
            answers.update(result)
            raise Exited

        def fail_json(self, **result: object) -> None:
            answers.update(result, failed=True)
            raise Exited

    monkeypatch.setattr(units_module, "AnsibleModule", FakeModule)
    with pytest.raises(Exited):
        units_module.main()
    return answers


def test_the_running_units_files_are_read_and_the_paths_tested_without_reading_them(units_module, monkeypatch, tmp_path):
    (tmp_path / "sglang-k26-ep8.service").write_text("[Unit]\nX-SGLang-Layout=ep8\nExecStart=old\n")
    (tmp_path / "sglang-k26-tp8.service").write_text("[Unit]\nX-SGLang-Layout=tp8\n")
    secret = tmp_path / "k26.yaml"
    secret.write_text("api-key: sk-never-read\n")
    shown = (
        "Id=sglang-k26-ep8.service\nSubState=running\nUnitFileState=enabled\n\n"
        "Id=sglang-k26-tp8.service\nSubState=dead\nUnitFileState=disabled\n"
    )
    params = {"unit_dir": str(tmp_path), "pattern": PATTERN, "read_running": True, "exists": [str(secret), str(tmp_path / "no")]}
    answer = run_main(units_module, monkeypatch, params, shown)
    assert answer["argv"][:3] == ["systemctl", "show", "--property=Id,SubState,UnitFileState"]
    assert answer["units"] == ["sglang-k26-ep8.service", "sglang-k26-tp8.service"]
    assert answer["running"] == ["sglang-k26-ep8.service"]
    assert answer["files"] == {"sglang-k26-ep8.service": "[Unit]\nX-SGLang-Layout=ep8\nExecStart=old\n"}
    assert answer["exists"] == {str(secret): True, str(tmp_path / "no"): False}
    assert "sk-never-read" not in json.dumps(answer) and not answer["changed"]


def test_a_swap_holding_the_lock_is_named_and_refused_when_asked(units_module, monkeypatch, tmp_path):
    lock = tmp_path / "sglang_service.swap.lock"
    holder = {"pid": 4242, "unit": "sglang-k26-ep8.service", "previous": "sglang-k26-tp8.service", "began": "now"}
    asked = {"unit_dir": str(tmp_path), "pattern": PATTERN, "lock_path": str(lock)}
    handle = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(handle, (json.dumps({**holder, "step": "wait until sglang-k26-ep8.service generates"}) + "\n").encode())
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = run_main(units_module, monkeypatch, {**asked, "fail_if_swapping": True})
        told = run_main(units_module, monkeypatch, asked)  # what status asks: told, not refused
    finally:
        os.close(handle)
    said = "A swap is running on this server now: to sglang-k26-ep8.service from sglang-k26-tp8.service"
    assert refused["failed"] and said in refused["msg"] and "units" not in refused
    assert "at step: wait until sglang-k26-ep8.service generates" in refused["msg"]
    assert not told.get("failed") and said in told["msg"] and told["swap"]["pid"] == 4242
    free = run_main(units_module, monkeypatch, {**asked, "fail_if_swapping": True})
    assert not free.get("failed") and free["swap"] is None and free["msg"] == ""
    assert free["units"] == [] and "argv" not in free  # no unit: no systemctl call
