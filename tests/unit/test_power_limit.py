"""A GPU power limit as a layout field and a search axis: declared, checked against the host's range, set by the
unit as it starts and put back as it stops (roles/sglang_service/files/sglang-power-limit), imitated by the
stand-in nvidia-smi and simulated by the stand-in server."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_layout.candidates import expand, parse_grid
from sglang_layout.errors import DeclarationError
from sglang_layout.preflight import Facts, check_layout
from sglang_layout.schema import parse_layout
from tests.conftest import REPO
from tests.unit import specs

HELPER = REPO / "roles" / "sglang_service" / "files" / "sglang-power-limit"
STANDIN_SMI = REPO / "tests" / "standins" / "nvidia-smi"


def test_a_layout_declares_whole_watts_and_anything_else_is_refused_by_name():
    assert parse_layout("ep8", {"tp": 8, "ep": 8, "power_limit": 450}).power_limit == 450
    assert parse_layout("ep8", {"tp": 8, "ep": 8}).power_limit is None
    for bad, said in (("450", "must be a whole number"), (0, "at least 1"), (450.5, "whole number"), (9000, "at most")):
        with pytest.raises(DeclarationError, match=said) as refused:
            parse_layout("ep8", {"tp": 8, "power_limit": bad})
        assert "sglang_layouts.ep8.power_limit" in str(refused.value)


def test_preflight_refuses_a_limit_the_gpus_do_not_accept_and_says_when_it_could_not_check():
    facts = Facts(gpu_count=8, gpu_memory_gib=94.97, gpu_power_range=(150.0, 600.0))
    inside = check_layout(parse_layout("ep8", {"tp": 8, "ep": 8, "power_limit": 300}), facts)
    assert not [f for f in inside.findings if f.rule == "power"]
    outside = check_layout(parse_layout("ep8", {"tp": 8, "ep": 8, "power_limit": 700}), facts)
    (finding,) = [f for f in outside.findings if f.rule == "power"]
    assert finding.severity == "error" and not outside.ok
    assert "sglang_layouts.ep8.power_limit = 700 W" in finding.message and "(150-600 W)" in finding.message
    assert "from 150 to 600 W" in finding.fix
    unknown = check_layout(parse_layout("ep8", {"tp": 8, "ep": 8, "power_limit": 700}), Facts(gpu_count=8))
    assert not [f for f in unknown.findings if f.rule == "power"]
    assert any(skip.startswith("power limit range") for skip in unknown.skipped)


def test_the_unit_sets_its_limit_as_it_starts_and_puts_the_one_before_back_as_it_stops():
    limited = specs.spec(parse_layout("ep8", {"tp": 8, "ep": 8, "power_limit": 300})).to_dict()
    assert limited["power_lines"] == [
        "ExecStartPre=+/usr/local/sbin/sglang-power-limit set %n 300",
        "ExecStopPost=-+/usr/local/sbin/sglang-power-limit restore %n",
    ]
    plain = specs.spec(parse_layout("ep8", {"tp": 8, "ep": 8})).to_dict()
    assert plain["power_lines"] == []  # no helper runs for a unit without a limit
    assert limited["power_helper"] == "/usr/local/sbin/sglang-power-limit"


def test_the_grid_axis_sets_the_layout_field_and_none_keeps_the_hosts_own():
    grid = [parse_grid("host.power_limit=300,none")]
    assert grid == [("host.power_limit", (300, None))]
    limited, own = expand({"ep8": {"tp": 8, "ep": 8, "power_limit": 500}}, None, grid)
    assert limited.entry["power_limit"] == 300 and "power_limit" not in own.entry
    assert limited.label == "ep8 + host.power_limit=300" and limited.name != own.name != "ep8"
    assert "args" not in limited.entry  # a host setting is no server flag
    with pytest.raises(DeclarationError, match=r"not a host setting.*host\.power_limit"):
        parse_grid("host.fan_speed=50")


def smi(state: Path, *args: str, sim: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "SGLANG_STANDIN_POWER_STATE": str(state)}
    if sim is not None:
        env["SGLANG_STANDIN_CONFIG"] = str(sim)
    return subprocess.run([str(STANDIN_SMI / "nvidia-smi"), *args], capture_output=True, text=True, env=env, check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="nvidia-smi -pl is root's, as on a real box")
def test_the_stand_in_nvidia_smi_answers_pl_as_the_real_one(tmp_path):
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"gpu_count": 2, "gpu_power_w": 600, "gpu_min_power_w": 150}))
    state = tmp_path / "run" / "limits.json"
    query = ("--query-gpu=index,power.limit", "--format=csv,noheader,nounits")
    assert smi(state, *query, sim=sim).stdout == "0, 600.00\n1, 600.00\n"
    done = smi(state, "-i", "1", "-pl", "300", sim=sim)
    assert done.returncode == 0
    assert done.stdout == "Power limit for GPU 00000000:02:00.0 was set to 300.00 W from 600.00 W.\nAll done.\n"
    assert smi(state, *query, sim=sim).stdout == "0, 600.00\n1, 300.00\n"
    refused = smi(state, "-pl", "1000", sim=sim)
    assert (
        refused.returncode == 2 and "is not a valid power limit which should be between 150.00 W and 600.00 W" in refused.stdout
    )
    assert smi(state, *query, sim=sim).stdout == "0, 600.00\n1, 300.00\n"  # refused: nothing changed


def load_helper(notes: Path):
    loader = importlib.machinery.SourceFileLoader("sglang_power_limit", str(HELPER))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    module.NOTES = str(notes)
    return module


@pytest.mark.skipif(os.geteuid() != 0, reason="nvidia-smi -pl is root's, as on a real box")
def test_the_helper_notes_the_limits_once_and_puts_them_back(tmp_path, monkeypatch):
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"gpu_count": 4, "gpu_power_w": 600}))
    state = tmp_path / "limits.json"
    monkeypatch.setenv("SGLANG_STANDIN_CONFIG", str(sim))
    monkeypatch.setenv("SGLANG_STANDIN_POWER_STATE", str(state))
    monkeypatch.setenv("PATH", f"{STANDIN_SMI}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    helper = load_helper(tmp_path / "notes")
    assert smi(state, "-i", "3", "-pl", "450").returncode == 0  # the owner's own limit on GPU 3
    assert helper.main(["set", "sglang-k26-ep4.service", "300"]) == 0
    # A second start (a failed one retried) notes nothing new: the limits to go back to stay the owner's.
    assert helper.main(["set", "sglang-k26-ep4.service", "250"]) == 0
    limits = lambda: smi(state, "--query-gpu=index,power.limit", "--format=csv,noheader,nounits").stdout  # noqa: E731
    assert limits() == "0, 600.00\n1, 600.00\n2, 250.00\n3, 250.00\n"
    assert helper.main(["restore", "sglang-k26-ep4.service"]) == 0
    assert limits() == "0, 600.00\n1, 600.00\n2, 600.00\n3, 450.00\n"
    assert not list((tmp_path / "notes").iterdir())
    assert helper.main(["restore", "sglang-k26-ep4.service"]) == 0  # nothing noted: nothing to do
    assert helper.main(["set", "unit", "lots"]) == 2


def test_the_stand_in_server_runs_with_the_limit_of_its_gpus(tmp_path, monkeypatch):
    path = REPO / "tests" / "standins" / "sglang" / "sglang" / "simulation.py"
    spec = importlib.util.spec_from_file_location("standin_simulation", path)
    simulation = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "standin_simulation", simulation)  # its dataclasses look their module up
    spec.loader.exec_module(simulation)
    Simulation, active_effects, host_settings = simulation.Simulation, simulation.active_effects, simulation.host_settings
    state = tmp_path / "limits.json"
    state.write_text(json.dumps({"0": 600.0, "1": 300.0}))
    monkeypatch.setenv("SGLANG_STANDIN_POWER_STATE", str(state))
    sim = Simulation(gpu_power_w=600.0)
    assert host_settings(sim, [0]) == {"power_limit": 600.0}
    assert host_settings(sim, [0, 1]) == {"power_limit": 300.0}  # the lowest of its GPUs'
    assert host_settings(sim, [5]) == {"power_limit": 600.0}  # never set: the default
    effect = {"host": "power_limit", "value": 300, "peak_factor": 0.7}
    assert active_effects([effect], object(), {}, "tp8-ep8-pp1-dp1", {"power_limit": 300.0}) == [effect]
    assert active_effects([effect], object(), {}, "tp8-ep8-pp1-dp1", {"power_limit": 600.0}) == []
    # docs/extending.md: a knob kind is a row of EFFECT_KINDS, picked up by the effects without other edits.
    monkeypatch.setitem(simulation.EFFECT_KINDS, "nodes", lambda name, args, environ, host: getattr(args, "nnodes", None))
    spread = {"nodes": "nnodes", "value": 2, "peak_factor": 0.5}
    two = type("Args", (), {"nnodes": 2})()
    assert active_effects([spread, effect], two, {}, "tp8-ep8-pp1-dp1", {"power_limit": 300.0}) == [spread, effect]


def test_a_host_setting_added_to_the_table_is_a_grid_axis_without_other_edits(monkeypatch):
    """docs/extending.md: a host setting is a row of candidates.HOST_AXES (its layout field and unit lines aside)."""
    from sglang_layout import candidates

    monkeypatch.setitem(candidates.HOST_AXES, "host.persistence", "persistence")
    grid = [candidates.parse_grid("host.persistence=1,none")]
    on, off = candidates.expand({"ep8": {"tp": 8}}, None, grid)
    assert on.entry["persistence"] == 1 and "persistence" not in off.entry and "args" not in on.entry


def test_the_helpers_own_spawn_failure_is_no_cause_of_the_servers():
    """A crashed server's cgroup can be gone when systemd spawns the ExecStopPost helper: those two lines say
    nothing of the crash, which is still found (here: the other node went away)."""
    from sglang_layout.diagnosis import diagnose

    journal = "\n".join(
        [
            "sglang-k26-tp8x2[41]: torch.distributed.DistBackendError: ncclRemoteError: remote process exited",
            "sglang-k26-tp8x2.service: Main process exited, code=exited, status=1/FAILURE",
            "sglang-k26-tp8x2.service: Failed to attach to cgroup /system.slice/sglang-k26-tp8x2.service: No such file",
            "sglang-k26-tp8x2.service: Failed at step CGROUP spawning /usr/local/sbin/sglang-power-limit: No such file",
        ]
    )
    assert diagnose(journal).cause == "peer_lost"
    # The same lines about the server's own process are still systemd's set-up failure.
    assert diagnose(journal.replace("/usr/local/sbin/sglang-power-limit", "/opt/sglang/venv/bin/python")).cause == "setup"
