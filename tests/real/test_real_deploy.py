"""The REAL sglang deployed by the real roles and deploy.yml on a rehearsal box, on CPU (tiny model).

Provision installs sglang==0.5.23 into the box from the wheelhouse downloaded once from PyPI (bound in
read-only, as an offline mirror would be) and records the flag table from the real --help. One CPU layout
serves, with an API key from the start; an ambiguous flag is refused by preflight, and with preflight off the
real argparse failure is diagnosed and rolled back to it (three real starts in all, each about a minute here;
the swap between two layouts that both start is the stand-in's, test_deploy.py). The test-only vllm shim
reaches the server through a .pth file the test drops into the provisioned venv (the layouts' env may not carry
PYTHONPATH: docs/security.md), never through a role.
"""

from __future__ import annotations

import json

import pytest

from tests.rehearsal import real_box as real_boxes
from tests.rehearsal import real_server
from tests.rehearsal.bench import benchmarks, on_box
from tests.rehearsal.playbook import run_playbook
from tests.rehearsal.standin import wait_http

LAYOUTS = {
    "cpu-a": {"tp": 1},
    "cpu-b": {"tp": 1, "args": {"max-running-requests": 8}},
    "cpu-bad": {"tp": 1, "args": {"cuda-graph-max-bs": 64}},
    "cpu-dcpq": {"tp": 1, "args": {"dcp-replicate-q-proj": True}},
}
API_KEY = "sk-real-box-7f3a9c2e5d1b4086"


@pytest.fixture(scope="module")
def real_box(real_python, box_support, cuda_repo, tmp_path_factory):
    directory = tmp_path_factory.mktemp("real-box")
    with real_boxes.provisioned(real_python, cuda_repo.base_url, directory, LAYOUTS, sglang_api_key=API_KEY) as real:
        yield real


def deploy(real_box, layout: str, *options: str):
    _, inventory, _ = real_box
    return run_playbook("deploy.yml", inventory, None, "-e", f"layout={layout}", *options, timeout=1800)


def active(box) -> list[str]:
    listed = box.run("systemctl", "list-units", "--state=active", "--plain", "--no-legend", "sglang-tiny-*").stdout
    return sorted(line.split()[0] for line in listed.splitlines() if line.strip())


def test_provision_records_the_real_flag_table(real_box):
    box, _, _ = real_box
    record = json.loads(box.run("sudo", "cat", "/etc/ansible/facts.d/sglang_venv.fact").stdout)["versions"]["0.5.23"]
    assert record["installed_version"] == "0.5.23"
    table = json.loads(box.run("sudo", "cat", record["flag_table"]).stdout)
    assert table["sglang_version"] == "0.5.23" and len(table["options"]) == 533


def test_unreadable_weights_are_refused_before_the_host_changes(real_box):
    box, _, _ = real_box
    refused = deploy(real_box, "cpu-a")
    assert refused.returncode != 0 and refused.changed(box.name) == 0
    assert "cannot read /srv/models/tiny-llama/model.safetensors" in refused.stdout and "chmod -R a+rX" in refused.stdout
    box.run("sudo", "chmod", "-R", "a+rX", "/srv/models/tiny-llama")


def test_the_real_server_serves_a_cpu_layout_and_says_where_its_start_went(real_box):
    """cpu-b serves, its API key in the inventory (test_the_real_server_takes_its_api_key_... checks it later, after
    the rollback has started cpu-b again); the verbose run's output holds no trace of the key."""
    box, _, port = real_box
    done = deploy(real_box, "cpu-b", "-v")
    assert done.returncode == 0, done.output[-4000:]
    assert API_KEY not in done.output
    assert active(box) == ["sglang-tiny-cpu-b.service"]
    assert wait_http(f"http://127.0.0.1:{port}/health_generate", 30) == 200
    # Where the start went, read from the real server's own lines (docs/search.md, startup phases).
    assert "weights loaded at" in done.stdout and "ready at" in done.stdout, done.stdout[-3000:]
    journal = box.run("sudo", "journalctl", "-u", "sglang-tiny-cpu-b", "--no-pager", "-o", "cat").stdout
    assert "The server is fired up and ready to roll!" in journal


def test_an_ambiguous_flag_is_refused_then_diagnosed_and_rolled_back_when_forced(real_box):
    box, _, port = real_box
    refused = deploy(real_box, "cpu-bad")
    assert refused.returncode != 0 and "ambiguous" in refused.stdout and refused.changed(box.name) == 0
    assert "--cuda-graph-max-bs-decode" in refused.stdout
    forced = deploy(real_box, "cpu-bad", "-e", "preflight=false")
    assert forced.returncode != 0
    assert "Cause: SGLang refused a command-line flag" in forced.stdout and "ambiguous option" in forced.stdout
    assert "Rolled back: sglang-tiny-cpu-b.service is serving again" in forced.stdout
    assert active(box) == ["sglang-tiny-cpu-b.service"]
    assert wait_http(f"http://127.0.0.1:{port}/health_generate", 30) == 200


def test_what_the_real_sglang_refuses_itself_is_refused_before_anything_stops(real_box):
    """Our rules pass cpu-dcpq; SGLang's own check (parallel_hook.py), run on the box as the service user in
    the unit's sandbox, refuses it: the deploy fails with SGLang's words and cpu-b keeps serving untouched."""
    box, _, port = real_box
    refused = deploy(real_box, "cpu-dcpq")
    assert refused.returncode != 0 and refused.changed(box.name) == 0
    said = "SGLang 0.5.23 refuses layout cpu-dcpq with its own check: ValueError: --dcp-replicate-q-proj requires --dcp-size > 1."
    assert said in refused.stdout, refused.output[-4000:]
    assert "cpu-dcpq: ours ok, SGLang refuses  <- disagree: our rules miss this" in refused.stdout
    assert active(box) == ["sglang-tiny-cpu-b.service"]
    assert wait_http(f"http://127.0.0.1:{port}/health_generate", 30) == 200


def test_our_benchmark_against_the_deployed_real_server_agrees_with_its_counts(real_box, real_python, tmp_path):
    box, inventory, _ = real_box
    done = benchmarks(
        "run",
        *on_box(box.name, inventory),
        "--endpoint",
        "generate",
        "--vocab-size",
        str(real_server.vocab_size(real_python)),
        "--levels",
        "1,4",
        "--output-tokens",
        "32",
        "--input-tokens",
        "16",
        "--min-requests",
        "8",
        "--rounds",
        "2",
        "--results-dir",
        str(tmp_path),
        "--api-key",
        API_KEY,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = tmp_path.rglob("*.json")
    run = json.loads(path.read_text())
    assert run["server"]["layout"] == "cpu-b" and run["server"]["sglang_version"] == "0.5.23"
    for level in run["levels"]:
        assert level["completed"] == level["requests"] and level["failed"] == 0
        assert level["length_mismatches"] == 0 and level["stream_count_mismatches"] == 0
        assert level["output_tokens"] == 32 * level["completed"]


def test_the_real_server_takes_its_api_key_from_the_credential_file_under_the_sandbox(real_box):
    """cpu-b as the rollback started it again: its key read from the credential file (--config), nowhere else."""
    box, inventory, port = real_box
    assert active(box) == ["sglang-tiny-cpu-b.service"]
    base = f"http://127.0.0.1:{port}"
    assert wait_http(base + "/health_generate", 30) == 200
    assert wait_http(base + "/v1/models", 5) == 401  # the real server enforces the key it read from --config
    answer = box.run(
        "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Authorization: Bearer {API_KEY}", base + "/v1/models"
    )
    assert answer.stdout == "200"
    (box.root / "root" / "pattern").write_text(API_KEY + "\n")
    traces = box.run(
        "sh", "-c", "grep -lF -f /root/pattern /proc/[0-9]*/cmdline /etc/systemd/system/* 2>/dev/null", user="root", check=False
    )
    assert traces.stdout.strip() == ""
    status = run_playbook("playbooks/status.yml", inventory)
    assert "sandbox: sglang-tiny-cpu-b.service:" in status.stdout, status.stdout[-2000:]
    # The key's removal restarts the server without it: test_deploy_trust.py, on the stand-in (a launch less here).
