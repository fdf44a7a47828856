"""deploy.yml on a provisioned rehearsal box with the stand-in server: swaps, refusals, crashes and rollbacks.

The tests run in file order on one box (deploy state carries over, as on a real host).
"""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.conftest import FIELD_NOTES_EP8_TUNED, FIELD_NOTES_MODEL_PATH, flag_pairs
from tests.rehearsal.bench import benchmarks, on_box
from tests.rehearsal.gpu_host import MODEL_PATH, true_decode_tok_s
from tests.rehearsal.standin import emitted, sent_decode_rate, sent_streams, wait_http

UNIT_DIR = "/etc/systemd/system"


def unit(layout: str) -> str:
    return f"sglang-k26-{layout}.service"


def state(box, layout: str) -> tuple[str, str]:
    active = box.run("systemctl", "is-active", unit(layout), check=False).stdout.strip()
    enabled = box.run("systemctl", "is-enabled", unit(layout), check=False).stdout.strip()
    return active, enabled


def main_pid(box, layout: str) -> str:
    return box.run("systemctl", "show", "--property=MainPID", "--value", unit(layout)).stdout.strip()


def project_units(box) -> list[str]:
    listed = box.run("sh", "-c", f"grep -l '^X-SGLang-Layout=' {UNIT_DIR}/sglang-*.service", check=False).stdout.split()
    return sorted(path.rsplit("/", 1)[1] for path in listed)


def units_that_are(box, question: str, answer: str) -> list[str]:
    return [name for name in project_units(box) if box.run("systemctl", question, name, check=False).stdout.strip() == answer]


def active_units(box) -> list[str]:
    return units_that_are(box, "is-active", "active")


def enabled_units(box) -> list[str]:
    return units_that_are(box, "is-enabled", "enabled")


def active_fact(box) -> dict:
    return json.loads(box.run("sudo", "cat", "/etc/ansible/facts.d/sglang_service.fact").stdout)


def serving_only(box, port: int, layout: str) -> None:
    assert active_units(box) == [unit(layout)] and enabled_units(box) == [unit(layout)]
    assert wait_http(f"http://127.0.0.1:{port}/health_generate", 10) == 200
    assert active_fact(box)["active_layout"] == layout


def deploy(provisioned, layout: str, *options: str, extra_vars: dict | None = None):
    return provisioned.playbook("deploy.yml", "-e", f"layout={layout}", *options, extra_vars=extra_vars)


def test_deploy_ep8_serves_and_deploying_it_again_changes_nothing(provisioned):
    first = deploy(provisioned, "ep8")
    assert first.returncode == 0, first.output[-3000:]
    serving_only(provisioned.box, provisioned.port, "ep8")
    again = deploy(provisioned, "ep8")
    assert again.returncode == 0, again.output[-3000:]
    assert again.changed(provisioned.box.name) == 0, again.stdout


def test_swap_to_tp8_leaves_exactly_one_layout_active_and_enabled(provisioned):
    swapped = deploy(provisioned, "tp8")
    assert swapped.returncode == 0, swapped.output[-3000:]
    assert "Swapping sglang-k26-ep8.service -> sglang-k26-tp8.service" in swapped.stdout
    # Preflight names the GPUs it judged against, their compute capability and PCIe link included.
    assert "GPUs: 8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition" in swapped.stdout
    assert "compute capability 12.0, PCIe Gen5 x16" in swapped.stdout
    # Where the start went, from the server's own lines in its journal (the stand-in logs SGLang's).
    (said,) = [line for line in swapped.stdout.splitlines() if "sglang-k26-tp8.service started in" in line]
    phases = [phase for phase in ("weights loaded at", "kv cache sized at", "graphs captured at", "ready at") if phase in said]
    assert len(phases) == 4, said
    serving_only(provisioned.box, provisioned.port, "tp8")
    assert state(provisioned.box, "ep8") == ("inactive", "disabled")


def test_gpus_held_outside_the_project_refuse_the_swap_before_anything_stops(provisioned):
    box = provisioned.box
    # A server started by hand on GPU 0-3: the stand-in nvidia-smi lists any `sglang.launch_server` process.
    box.run(
        "sudo",
        "systemd-run",
        "--unit=by-hand-server",
        "--setenv=CUDA_VISIBLE_DEVICES=0,1,2,3",
        "python3",
        "-c",
        "import time; time.sleep(600)",
        "sglang.launch_server",
    )
    try:
        refused = deploy(provisioned, "ep8")
        assert refused.returncode != 0
        assert "GPU 0,1,2,3,4,5,6,7 are in use by pid" in refused.stdout, refused.stdout[-3000:]
        assert "on GPU 0,1,2,3 holding" in refused.stdout and "outside this project's units" in refused.stdout
        assert refused.changed(box.name) == 0
        serving_only(box, provisioned.port, "tp8")
    finally:
        box.run("sudo", "systemctl", "stop", "by-hand-server", check=False)
    # With the holder gone, the swap goes through (and back, for the tests that follow).
    assert deploy(provisioned, "ep8").returncode == 0
    assert deploy(provisioned, "tp8").returncode == 0
    serving_only(box, provisioned.port, "tp8")


@pytest.mark.parametrize(
    ("layout", "reasons"),
    [
        ("tp2ep4", ["preflight refused layout tp2ep4", "ZeroDivisionError", "on 8 GPUs write tp 8, ep 4"]),
        ("tp4ep2", ["preflight refused layout tp4ep2", "uses 4 GPUs", "out of memory"]),
    ],
)
def test_preflight_refuses_the_field_failures_and_tp8_keeps_serving_untouched(provisioned, layout, reasons):
    box = provisioned.box
    before = (main_pid(box, "tp8"), project_units(box))
    refused = deploy(provisioned, layout)
    assert refused.returncode != 0
    for reason in reasons:
        assert reason in refused.stdout, refused.stdout[-3000:]
    assert refused.changed(box.name) == 0
    assert (main_pid(box, "tp8"), project_units(box)) == before
    serving_only(box, provisioned.port, "tp8")


def test_what_sglang_itself_refuses_is_refused_before_anything_stops_and_forcing_it_rolls_back(provisioned, declared_vars):
    """Our rules pass the layout; the installed SGLang's own check refuses it (the stand-in imitates the real
    parallel_hook.py:267). The deploy stops before the host changes, with SGLang's words; preflight.yml shows
    both verdicts and marks our rule for review; with the checks switched off the server refuses at start."""
    box = provisioned.box
    layouts = {
        **declared_vars["sglang_layouts"],
        "dcpq": {"tp": 8, "args": {"dcp-replicate-q-proj": True}},
        "ep4-deepep": {"tp": 8, "ep": 4, "args": {"moe-a2a-backend": "deepep"}},
    }
    before = (main_pid(box, "tp8"), project_units(box))
    refused = deploy(provisioned, "dcpq", extra_vars={"sglang_layouts": layouts})
    assert refused.returncode != 0 and refused.changed(box.name) == 0
    said = "SGLang 0.5.23+standin refuses layout dcpq with its own check: ValueError: --dcp-replicate-q-proj requires"
    assert said in refused.stdout, refused.stdout[-3000:]
    assert "dcpq: ours ok, SGLang refuses  <- disagree: our rules miss this" in refused.stdout
    assert (main_pid(box, "tp8"), project_units(box)) == before
    shown = provisioned.playbook("playbooks/preflight.yml", extra_vars={"sglang_layouts": layouts}).succeeded()
    assert (
        "tp8: ours ok, SGLang accepts" in shown.stdout
        and "tp2ep4: ours refused, SGLang accepts  (ours foresee a failure at load" in shown.stdout
    )
    assert "rewrites ep_size: 4 -> 8 (_a2a_ep_size)" in shown.stdout  # what SGLang will really run
    forced = deploy(provisioned, "dcpq", "-e", "sglang_oracle=false", extra_vars={"sglang_layouts": layouts})
    assert forced.returncode != 0 and "not asked (-e sglang_oracle=false)" in forced.stdout
    assert "ValueError: --dcp-replicate-q-proj requires --dcp-size > 1." in forced.stdout, forced.stdout[-3000:]
    assert "Rolled back: sglang-k26-tp8.service is serving again" in forced.stdout
    serving_only(box, provisioned.port, "tp8")


def test_with_preflight_off_a_crash_is_diagnosed_and_tp8_serves_again(provisioned):
    """One cause through the whole path: the crash's journal read on the host, named, quoted, rolled back. Each
    cause's naming is test_diagnosis.py's; on a box, an out-of-memory start is test_multinode.py's and a refused
    flag test_changed_arguments_restart_through_the_swap_and_a_bad_change_is_undone's (and the real tier's)."""
    box, layout = provisioned.box, "tp2ep4"
    crashed = deploy(provisioned, layout, "-e", "preflight=false")
    assert crashed.returncode != 0
    assert f"Layout {layout} did not start: {unit(layout)} exited" in crashed.stdout, crashed.stdout[-3000:]
    assert "Cause: a parallel-width error" in crashed.stdout
    assert "ZeroDivisionError: integer division or modulo by zero" in crashed.stdout
    assert "Rolled back: sglang-k26-tp8.service is serving again" in crashed.stdout
    assert state(box, layout) in {("failed", "disabled"), ("inactive", "disabled")}
    serving_only(box, provisioned.port, "tp8")


@pytest.mark.parametrize(
    ("layout", "extra_vars", "message"),
    [
        ("nope", None, "layout = 'nope': is not declared in sglang_layouts. Fix: use one of: tp8, pp8, ep8"),
        ("bad", {"sglang_layouts": {"bad": {"tp": "eight"}}}, "sglang_layouts.bad.tp = 'eight': must be a whole number"),
        (
            "warp",
            {"sglang_layouts": {"warp": {"tp": 8, "args": {"enable-warp-drive": True}}}},
            "--enable-warp-drive is not a flag of SGLang 0.5.23+standin",
        ),
    ],
)
def test_bad_declarations_are_refused_before_the_host_changes(provisioned, layout, extra_vars, message):
    box = provisioned.box
    before = (main_pid(box, "tp8"), project_units(box))
    refused = deploy(provisioned, layout, extra_vars=extra_vars)
    assert refused.returncode != 0
    assert message in refused.stdout, refused.stdout[-3000:]
    assert (main_pid(box, "tp8"), project_units(box)) == before


@pytest.fixture
def common_args_with(declared_vars):
    """Extra vars: the declared common args with some changed."""
    return lambda **changes: {"sglang_common_args": {**declared_vars["sglang_common_args"], **changes}}


def test_check_diff_shows_the_unit_that_would_change_and_touches_nothing(provisioned, common_args_with):
    box = provisioned.box
    before = (main_pid(box, "tp8"), box.run("cat", f"{UNIT_DIR}/{unit('tp8')}").stdout)
    checked = deploy(provisioned, "tp8", "--check", "--diff", extra_vars=common_args_with(**{"max-running-requests": 128}))
    assert checked.returncode == 0, checked.output[-3000:]
    assert "+ExecStart=" in checked.stdout and "--max-running-requests 128" in checked.stdout
    assert "Would swap sglang-k26-tp8.service -> sglang-k26-tp8.service" in checked.stdout
    assert (main_pid(box, "tp8"), box.run("cat", f"{UNIT_DIR}/{unit('tp8')}").stdout) == before


def test_changed_arguments_restart_through_the_swap_and_a_bad_change_is_undone(provisioned, common_args_with):
    box = provisioned.box
    old_pid = main_pid(box, "tp8")
    changed = deploy(provisioned, "tp8", extra_vars=common_args_with(**{"max-running-requests": 128}))
    assert changed.returncode == 0, changed.output[-3000:]
    assert main_pid(box, "tp8") != old_pid
    assert "--max-running-requests 128" in box.run("cat", f"{UNIT_DIR}/{unit('tp8')}").stdout
    serving_only(box, provisioned.port, "tp8")

    good_unit = box.run("cat", f"{UNIT_DIR}/{unit('tp8')}").stdout
    broken = deploy(
        provisioned,
        "tp8",
        "-e",
        "preflight=false",
        extra_vars=common_args_with(**{"max-running-requests": 128, "attention-backend": "warp"}),
    )
    assert broken.returncode != 0
    assert "invalid choice: 'warp'" in broken.stdout and "Rolled back: sglang-k26-tp8.service is serving again" in broken.stdout
    assert box.run("cat", f"{UNIT_DIR}/{unit('tp8')}").stdout == good_unit
    serving_only(box, provisioned.port, "tp8")

    restored = deploy(provisioned, "tp8")
    assert restored.returncode == 0, restored.output[-3000:]
    assert "--max-running-requests" not in box.run("cat", f"{UNIT_DIR}/{unit('tp8')}").stdout


def unit_file(box, layout: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(ExecStart words, Environment, other [Service]/[Install] keys) of a deployed unit."""
    argv, env, keys = [], {}, {}
    for line in box.run("cat", f"{UNIT_DIR}/{unit(layout)}").stdout.splitlines():
        if line.startswith("ExecStart="):
            argv = shlex.split(line.removeprefix("ExecStart="))
        elif line.startswith("Environment="):
            name, value = shlex.split(line.removeprefix("Environment="))[0].split("=", 1)
            env[name] = value
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            keys[key] = value
    return argv, env, keys


def test_the_deployed_ep8_tuned_unit_matches_the_field_notes_flag_by_flag(provisioned):
    box = provisioned.box
    deployed = deploy(provisioned, "ep8-tuned")
    assert deployed.returncode == 0, deployed.output[-3000:]
    argv, env, keys = unit_file(box, "ep8-tuned")
    venv = "/opt/sglang/venv-0.5.23"
    assert argv[:3] == [f"{venv}/bin/python", "-m", "sglang.launch_server"]
    # The field notes' flags and values, with this box's model path, port and host in place of the field's.
    expected = [
        {FIELD_NOTES_MODEL_PATH: MODEL_PATH, "30001": str(provisioned.port), "0.0.0.0": "127.0.0.1"}.get(word, word)
        for word in FIELD_NOTES_EP8_TUNED
    ]
    assert flag_pairs(argv[3:]) == flag_pairs(expected) and len(argv[3:]) == len(expected)
    site = f"{venv}/lib/python3.11/site-packages/nvidia"
    assert env == {
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        "PATH": f"/usr/local/cuda-13.0/bin:{venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LD_LIBRARY_PATH": f"{site}/cu13/lib:{site}/cuda_runtime/lib:/usr/local/cuda-13.0/lib64",
        "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_LEVEL": "5",
        "NCCL_ALGO": "Ring",
        "OMP_NUM_THREADS": "8",
        "CUDA_HOME": "/usr/local/cuda-13.0",
    }
    assert {k: keys[k] for k in ("Type", "Restart", "StandardOutput", "StandardError", "WantedBy", "User")} == {
        "Type": "simple",
        "Restart": "no",
        "StandardOutput": "journal",
        "StandardError": "journal",
        "WantedBy": "multi-user.target",
        "User": "sglang",
    }
    assert box.run("head", "-3", f"{UNIT_DIR}/{unit('ep8-tuned')}").stdout.startswith("#\n# Ansible managed")
    serving_only(box, provisioned.port, "ep8-tuned")


def test_status_reports_and_stop_stops_every_layout(provisioned):
    box = provisioned.box
    status = provisioned.playbook("playbooks/status.yml")
    assert status.returncode == 0, status.output[-3000:]
    assert '"active layout: ep8-tuned"' in status.stdout and '/health_generate -> 200"' in status.stdout, status.stdout
    assert '"sglang: 0.5.23+standin"' in status.stdout and '"gpus: 8 x NVIDIA RTX PRO 6000' in status.stdout
    assert "compute capability 12.0, PCIe Gen5 x16, driver 580.95.05" in status.stdout
    stopped = provisioned.playbook("playbooks/stop.yml")
    assert stopped.returncode == 0, stopped.output[-3000:]
    assert active_units(box) == [] and enabled_units(box) == []
    assert wait_http(f"http://127.0.0.1:{provisioned.port}/health_generate", 1) == 0
    again = provisioned.playbook("playbooks/stop.yml")
    assert again.changed(box.name) == 0


def test_a_rollback_that_fails_too_says_why_and_status_says_what_puts_it_right(provisioned):
    """The simulated weights grow past every layout's GPUs: the new layout and the one to return to both run out of
    memory loading (preflight's estimate, from config.json, still passes: it is run with preflight off anyway)."""
    box = provisioned.box
    deploy(provisioned, "ep8").succeeded()
    simulation = box.root / "etc" / "sglang-standin.json"
    saved = simulation.read_text()
    simulation.write_text(json.dumps({**json.loads(saved), "weights_gib": 5000}))
    try:
        failed = deploy(provisioned, "tp8", "-e", "preflight=false")
    finally:
        simulation.write_text(saved)
    assert failed.returncode != 0
    assert "Rolling back to sglang-k26-ep8.service FAILED too" in failed.stdout, failed.stdout[-3000:]
    # The old layout's own cause, from its own journal, after the new one's.
    assert re.search(
        r"did not start: .*?Cause: out of GPU memory.*?did not come back: Cause: out of GPU memory", failed.stdout, re.S
    )
    assert active_units(box) == [] and enabled_units(box) == []  # neither starts at boot
    status = provisioned.playbook("playbooks/status.yml").succeeded()
    assert "agreement: nothing serves, but the record says sglang-k26-ep8.service" in status.stdout, status.stdout[-2000:]
    assert "Fix: ansible-playbook deploy.yml -e layout=ep8" in status.stdout
    deploy(provisioned, "ep8").succeeded()
    status = provisioned.playbook("playbooks/status.yml").succeeded()
    assert "agreement: the running, enabled and recorded layout agree" in status.stdout


DRAFT_PATH = "/srv/models/Kimi-K2.6-EAGLE3"


def test_a_speculative_layout_runs_its_draft_fetched_from_the_controller_and_is_measured_chunk_by_chunk(
    provisioned, declared_vars, tmp_path
):
    """A draft declared once (sglang_draft_models), fetched by the sglang_model role from the controller, named by
    a layout: the unit gets SGLang's speculative flags and the draft's path. The stand-in then accepts 3, 1, 4, 2
    tokens per step (mean 2.5), one chunk each, each step 1.2 inter-token times: the client counts every token
    and reads what the server sent per request (5% beside the other worker; the clock tests hold 1-2% alone).
    A layout whose draft is not on the host is refused before anything stops."""
    box = provisioned.box
    source = tmp_path / "eagle3"
    source.mkdir()
    (source / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}\n')
    drafts = {
        "eagle3": {
            "path": DRAFT_PATH,
            "algorithm": "EAGLE3",
            "args": {"speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4},
            "source": "controller",
            "controller_path": str(source),
        },
        "absent": {"path": "/srv/models/not-provisioned", "algorithm": "EAGLE3"},
        "locked": {"path": "/srv/models/locked", "algorithm": "EAGLE3"},
    }
    layouts = {
        **declared_vars["sglang_layouts"],
        "ep8-eagle3": {"tp": 8, "ep": 8, "draft": "eagle3", "args": {"max-running-requests": 64}},
        "ep8-absent": {"tp": 8, "ep": 8, "draft": "absent"},
        "ep8-locked": {"tp": 8, "ep": 8, "draft": "locked"},
    }
    declared = {"sglang_draft_models": drafts, "sglang_layouts": layouts}
    fetch = tmp_path / "fetch.yml"
    fetch.write_text("- name: Fetch the models\n  hosts: all\n  gather_facts: false\n  roles: [sglang_model]\n")
    fetched = provisioned.playbook(str(fetch), extra_vars=declared).succeeded()
    assert (box.root / DRAFT_PATH.lstrip("/") / "config.json").exists() and fetched.changed(box.name) >= 2
    assert provisioned.playbook(str(fetch), extra_vars=declared).changed(box.name) == 0  # its marker: fetched once

    deploy(provisioned, "ep8").succeeded()
    refused = deploy(provisioned, "ep8-absent", extra_vars=declared)
    assert refused.returncode != 0 and refused.changed(box.name) == 0
    assert "ep8-absent names the draft absent, but /srv/models/not-provisioned/config.json is not on" in refused.stdout
    locked = box.root / "srv" / "models" / "locked"  # there, but only root may enter it
    locked.mkdir(parents=True, exist_ok=True)
    (locked / "config.json").write_text("{}\n")
    locked.chmod(0o700)
    refused = deploy(provisioned, "ep8-locked", extra_vars=declared)
    assert refused.returncode != 0 and refused.changed(box.name) == 0
    assert "names the draft locked, but it is on" in refused.stdout and "out of the" in refused.stdout, refused.stdout[-2000:]
    assert "chmod -R a+rX /srv/models/locked" in refused.stdout
    serving_only(box, provisioned.port, "ep8")

    deploy(provisioned, "ep8-eagle3", extra_vars=declared).succeeded()
    command = (box.root / UNIT_DIR.lstrip("/") / unit("ep8-eagle3")).read_text()
    assert f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {DRAFT_PATH}" in command
    assert "--speculative-num-steps 3" in command and "--max-running-requests 64" in command
    results = tmp_path / "results"
    done = benchmarks(
        "run",
        *on_box(box.name, provisioned.inventory),
        *("--levels", "1,8", "--output-tokens", "64", "--rounds", "2", "--metrics-interval", "0"),
        *("--results-dir", str(results)),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (path,) = results.rglob("*.json")
    run = json.loads(path.read_text())
    log = emitted(f"http://127.0.0.1:{provisioned.port}")
    for level in run["levels"]:
        assert level["output_tokens"] == 64 * level["completed"] and level["stream_count_mismatches"] == 0
        assert level["decode_tok_s"]["p50"] == pytest.approx(sent_decode_rate(sent_streams(log), level["window"]), rel=0.05)
    # 2.5 tokens a step, a step 1.2 x 15.4 ms: ~135 tok/s per request at C=1, where plain EP8 decodes 65.
    (one,) = (level for level in run["levels"] if level["concurrency"] == 1)
    assert one["decode_tok_s"]["p50"] > 1.6 * true_decode_tok_s("tp8-ep8-pp1-dp1", 1)
    deploy(provisioned, "ep8").succeeded()
