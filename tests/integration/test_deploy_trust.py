"""deploy.yml on the provisioned box, as a careful attacker and a new user would try it.

The unit carries exactly the declared command under a systemd sandbox the stand-in serves in;
an API key is used by the server and the benchmark and appears nowhere else; smuggled flags
and injected lines are refused or neutralised before the host changes.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import psutil
import pytest

from tests.integration.test_deploy import UNIT_DIR, deploy, main_pid, project_units, serving_only, unit
from tests.rehearsal.bench import benchmarks, on_box

API_KEY = "sk-rehearsal-2c7e9d41f0a8b3c5"
INJECTION = "EP8\n[Service]\nExecStartPre=+/bin/touch /tmp/injected"
SANDBOX = (
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "RestrictRealtime=yes",
    "RestrictNamespaces=yes",
    "SystemCallArchitectures=native",
    "CapabilityBoundingSet=",
    "UMask=0077",
    "DevicePolicy=closed",
    "DeviceAllow=char-nvidia-frontend rw",
    "DeviceAllow=char-nvidia-uvm rw",
    "DeviceAllow=char-nvidia-caps rw",
    "LimitMEMLOCK=infinity",
    "ReadWritePaths=/var/lib/sglang",
)


def http_status(url: str, key: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


@contextlib.contextmanager
def processes_holding(secret: str) -> Iterator[dict[int, str]]:
    """While the block runs, every process of the machine (the boxes' too: one PID namespace seen from here) is
    read every 100 ms; the dict ends up naming each one whose environment or command line held `secret`."""
    seen: dict[int, str] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for process in psutil.process_iter():
                with contextlib.suppress(psutil.Error):
                    command = process.cmdline()
                    words = [*command, *(f"{k}={v}" for k, v in process.environ().items())]
                    # A child caught between fork and exec shows its parent's environment: read it again later.
                    if any(secret in word for word in words) and process.cmdline() == command:
                        seen.setdefault(process.pid, " ".join(command)[:100])
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join(10)


def unit_text(box, layout: str) -> str:
    return box.run("cat", f"{UNIT_DIR}/{unit(layout)}").stdout


def test_the_unit_is_hardened_the_stand_in_serves_under_it_and_status_rates_it(provisioned):
    box = provisioned.box
    deployed = deploy(provisioned, "ep8")
    assert deployed.returncode == 0, deployed.output[-3000:]
    serving_only(box, provisioned.port, "ep8")
    lines = unit_text(box, "ep8").splitlines()
    for directive in SANDBOX:
        assert directive in lines, directive
    assert not [line for line in lines if line.startswith(("MemoryDenyWriteExecute=", "PrivateDevices=", "PrivateUsers="))]
    shown = box.run(
        "systemctl", "show", unit("ep8"), "--property=ProtectSystem,ProtectHome,NoNewPrivileges,CapabilityBoundingSet"
    )
    assert "ProtectSystem=strict" in shown.stdout and "NoNewPrivileges=yes" in shown.stdout
    assert "CapabilityBoundingSet=\n" in shown.stdout + "\n"  # no capability at all
    status = provisioned.playbook("playbooks/status.yml")
    assert status.returncode == 0, status.output[-3000:]
    score = re.search(rf'"sandbox: {re.escape(unit("ep8"))}: ([0-9.]+) (\w+)', status.stdout)
    assert score, status.stdout[-2000:]
    assert float(score.group(1)) <= 3.0, score.group(0)  # docs/security.md states the figure


def test_a_layout_can_loosen_one_sandbox_knob_and_nothing_else(provisioned):
    box = provisioned.box
    loosened = {
        "sglang_layouts": {"ep8": {"tp": 8, "ep": 8, "hardening": {"SystemCallFilter": None, "ProtectHome": "read-only"}}}
    }
    deployed = deploy(provisioned, "ep8", extra_vars=loosened)
    assert deployed.returncode == 0, deployed.output[-3000:]
    lines = unit_text(box, "ep8").splitlines()
    assert "ProtectHome=read-only" in lines and not [line for line in lines if line.startswith("SystemCallFilter=")]
    sneaky = {"sglang_layouts": {"ep8": {"tp": 8, "ep": 8, "hardening": {"ExecStartPre": "+/bin/touch /tmp/x"}}}}
    before = (main_pid(box, "ep8"), project_units(box), unit_text(box, "ep8"))
    refused = deploy(provisioned, "ep8", "-e", "preflight=false", extra_vars=sneaky)
    assert refused.returncode != 0 and "is not one of the sandbox directives" in refused.stdout
    assert (main_pid(box, "ep8"), project_units(box), unit_text(box, "ep8")) == before
    privileged = {"sglang_service_hardening": {"AmbientCapabilities": "CAP_SYS_ADMIN CAP_SETUID", "CapabilityBoundingSet": None}}
    refused = deploy(provisioned, "ep8", "-e", "preflight=false", extra_vars=privileged)
    assert refused.returncode != 0 and "would grant CAP_SYS_ADMIN, CAP_SETUID" in refused.stdout, refused.stdout[-2000:]
    assert (main_pid(box, "ep8"), project_units(box), unit_text(box, "ep8")) == before


def test_a_capability_on_the_short_list_is_granted_and_said_in_preflight_and_status(provisioned):
    grant = {"AmbientCapabilities": "CAP_SYS_PTRACE", "CapabilityBoundingSet": "CAP_SYS_PTRACE"}
    deployed = deploy(provisioned, "ep8", extra_vars={"sglang_service_hardening": grant})
    assert deployed.returncode == 0, deployed.output[-3000:]
    assert "the server is granted CAP_SYS_PTRACE" in deployed.stdout
    status = provisioned.playbook("playbooks/status.yml", extra_vars={"sglang_service_hardening": grant}).succeeded()
    assert "privileges: WARNING: the server is granted CAP_SYS_PTRACE" in status.stdout
    deploy(provisioned, "ep8").succeeded()  # the plain sandbox again, for the tests after this one
    status = provisioned.playbook("playbooks/status.yml").succeeded()
    assert "privileges: no capability granted" in status.stdout


def test_a_sandbox_systemd_cannot_set_up_is_diagnosed_from_systemds_own_lines(provisioned):
    """The process dies before SGLang runs, so only systemd's lines about the start say why (status 226). SGLang's
    own checks run in the same sandbox first, so the deploy stops there and nothing changes; with them off, the
    launch fails the same way and is rolled back."""
    box = provisioned.box
    deploy(provisioned, "ep8").succeeded()
    before = main_pid(box, "ep8")
    broken = {"ReadWritePaths": ["/var/lib/sglang", "/srv/not-there"]}
    refused = deploy(provisioned, "tp8", extra_vars={"sglang_service_hardening": broken})
    assert refused.returncode != 0 and refused.changed(box.name) == 0
    assert "could not run in the unit's sandbox, so the layout would not start either" in refused.stdout, refused.stdout[-3000:]
    assert "Cause: systemd could not set up the server's process (it never ran)." in refused.stdout
    assert "status=226/NAMESPACE" in refused.stdout and main_pid(box, "ep8") == before
    failed = deploy(provisioned, "tp8", "-e", "sglang_oracle=false", extra_vars={"sglang_service_hardening": broken})
    assert failed.returncode != 0
    assert "Cause: systemd could not set up the server's process (it never ran)." in failed.stdout, failed.stdout[-3000:]
    assert "status=226/NAMESPACE" in failed.stdout
    assert "Rolled back: sglang-k26-ep8.service is serving again" in failed.stdout
    serving_only(box, provisioned.port, "ep8")


def test_an_injected_description_stays_a_comment(provisioned):
    box = provisioned.box
    deployed = deploy(provisioned, "inj", extra_vars={"sglang_layouts": {"inj": {"tp": 8, "ep": 8, "description": INJECTION}}})
    assert deployed.returncode == 0, deployed.output[-3000:]
    assert "folded to one line" in deployed.stdout
    text = unit_text(box, "inj")
    assert text.count("[Service]") == 2  # the real section, and the folded text inside the comment line
    assert [line for line in text.splitlines() if "ExecStartPre" in line] == [
        "# Layout inj: EP8 [Service] ExecStartPre=+/bin/touch /tmp/injected"
    ]
    assert box.run("systemctl", "show", "--property=ExecStartPre", "--value", unit("inj")).stdout.strip() == ""
    assert box.run("test", "-e", "/tmp/injected", check=False).returncode != 0
    serving_only(box, provisioned.port, "inj")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"hos": "127.0.0.2"}, "--host is rendered by the project from `sglang_bind_address` (argparse reads --hos as --host)"),
        ({"tp": 2}, "--tp-size is rendered by the project from `tp`"),
        ({"served-model-name": ["kimi", "--tp-size", "2", "--model-path", "/x"]}, "argparse would read it as another flag"),
        ({"api-key": "sk-in-args-0123456789"}, "sglang_api_key"),
    ],
)
def test_smuggled_flags_are_refused_before_the_host_changes_even_with_preflight_off(provisioned, args, message):
    box = provisioned.box
    before = (main_pid(box, "inj"), project_units(box))
    refused = deploy(
        provisioned, "sneak", "-e", "preflight=false", extra_vars={"sglang_layouts": {"sneak": {"tp": 8, "args": args}}}
    )
    assert refused.returncode != 0
    assert message in refused.stdout, refused.stdout[-3000:]
    assert "sk-in-args-0123456789" not in refused.output
    assert (main_pid(box, "inj"), project_units(box)) == before


@pytest.mark.parametrize("preflight", ["true", "false"])
def test_a_planted_sitecustomize_never_runs_the_code_loading_variable_is_refused(provisioned, preflight):
    """As a local user who can write /var/tmp would try it: code on a PYTHONPATH the declaration names."""
    box = provisioned.box
    planted = box.root / "var" / "tmp" / "pp"
    planted.mkdir(parents=True, exist_ok=True)
    (planted / "sitecustomize.py").write_text("open('/var/tmp/sitecustomize-ran', 'w').write('ran')\n")
    before = (main_pid(box, "inj"), project_units(box))
    layouts = {"pp": {"tp": 8, "ep": 8, "env": {"PYTHONPATH": "/var/tmp/pp"}}}
    refused = deploy(provisioned, "pp", "-e", f"preflight={preflight}", extra_vars={"sglang_layouts": layouts})
    assert refused.returncode != 0 and refused.changed(box.name) == 0
    assert "sglang_layouts.pp.env.PYTHONPATH" in refused.stdout, refused.stdout[-3000:]
    assert "can make Python load or redirect code" in refused.stdout
    assert not (box.root / "var" / "tmp" / "sitecustomize-ran").exists()
    assert (main_pid(box, "inj"), project_units(box)) == before


def secret_traces(box) -> str:
    """Where a key must never be: units, world-readable state, and every process's command line."""
    # The pattern comes from a file, so grep's own command line does not hold it.
    (box.root / "root" / "pattern").write_text("2c7e9d41f0a8b3c5\n")
    places = f"{UNIT_DIR} /etc/ansible /var/lib/sglang /proc/[0-9]*/cmdline"
    found = box.run("sh", "-c", f"grep -rlF -f /root/pattern {places} 2>/dev/null", user="root", check=False)
    return found.stdout.strip()


def test_an_api_key_guards_the_server_and_appears_nowhere_else(provisioned, tmp_path, private_tmp):
    box = provisioned.box
    keyed = {"sglang_api_key": API_KEY, "sglang_admin_api_key": "admin-rehearsal-5b1d0c9e7a"}
    checked = deploy(provisioned, "ep8", "--check", "--diff", "-v", extra_vars=keyed)
    assert checked.returncode == 0, checked.output[-3000:]
    deployed = deploy(provisioned, "ep8", "--diff", "-v", extra_vars=keyed)
    assert deployed.returncode == 0, deployed.output[-3000:]
    for run in (checked, deployed):
        assert "2c7e9d41f0a8b3c5" not in run.output and "5b1d0c9e7a" not in run.output
    serving_only(box, provisioned.port, "ep8")
    base = f"http://127.0.0.1:{provisioned.port}"
    assert http_status(base + "/v1/models") == 401 and http_status(base + "/v1/models", API_KEY) == 200
    assert http_status(base + "/health_generate") == 200  # health stays open, as SGLang's does
    assert "--config" in unit_text(box, "ep8") and "LoadCredential=sglang-secrets.yaml:/etc/sglang/secrets/k26.yaml" in unit_text(
        box, "ep8"
    )
    assert box.run("stat", "-c", "%U:%G %a", "/etc/sglang/secrets/k26.yaml", user="root").stdout.split() == ["root:root", "600"]
    assert secret_traces(box) == ""
    again = deploy(provisioned, "ep8", extra_vars=keyed)
    assert again.returncode == 0 and again.changed(box.name) == 0, again.stdout[-3000:]

    with processes_holding(API_KEY) as holders:
        done = benchmarks(
            "run",
            *on_box(box.name, provisioned.inventory),
            "--levels",
            "1",
            "--output-tokens",
            "8",
            "--input-tokens",
            "4",
            "--min-requests",
            "2",
            "--rounds",
            "1",
            "--results-dir",
            str(tmp_path / "results"),
            env={"SGLANG_API_KEY": API_KEY, "TMPDIR": str(private_tmp)},
            timeout=600,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    # The key was read once and went to the load generator in a private file: no child inherited it (the
    # benchmark process itself keeps its environment as it was started, in /proc, whatever it unsets).
    assert [command for command in holders.values() if "-m benchmarks" not in command] == [], holders
    assert list(private_tmp.iterdir()) == []
    (saved,) = (tmp_path / "results").rglob("*.json")
    assert "2c7e9d41f0a8b3c5" not in saved.read_text() + done.stdout + done.stderr
    assert json.loads(saved.read_text())["levels"][0]["completed"] == 2

    old_pid = main_pid(box, "ep8")
    unkeyed = deploy(provisioned, "ep8")
    assert unkeyed.returncode == 0, unkeyed.output[-3000:]
    assert main_pid(box, "ep8") != old_pid  # the key went away: the server restarted without it
    assert box.run("test", "-e", "/etc/sglang/secrets/k26.yaml", user="root", check=False).returncode != 0
    assert http_status(base + "/v1/models") == 200


def test_a_malformed_key_is_refused_without_showing_it(provisioned):
    box = provisioned.box
    before = (main_pid(box, "ep8"), project_units(box))
    refused = deploy(provisioned, "ep8", "-v", extra_vars={"sglang_api_key": "-short key"})
    assert refused.returncode != 0 and "sglang_api_key must be 16 to 512 characters long" in refused.stdout
    assert "-short key" not in refused.output
    assert (main_pid(box, "ep8"), project_units(box)) == before
