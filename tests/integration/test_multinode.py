"""One layout across two rehearsal boxes: SGLang's own multi-node launch, deployed, swapped and rolled back as one.

Two boxes, each a provisioned GPU host with the stand-in server, in the inventory group `k26_pair`
(box a first: rank 0). The boxes share the host's network, so each has its own API port and rank 0
listens for the rendezvous on 127.0.0.1:<dist port> (its ansible_host, as sglang_node_address would be
on real hosts). The tests run in file order on the same two boxes.
"""

from __future__ import annotations

import time

import pytest

from tests.rehearsal.gpu_pair import Pair, changed_json, model_config, unit
from tests.rehearsal.playbook import run_playbook
from tests.rehearsal.standin import wait_http


def fatal_line(stdout: str, host: str) -> str:
    """The last failure Ansible prints for a host (the run's verdict; its message JSON-escaped on that line)."""
    return [line for line in stdout.splitlines() if line.startswith(f"fatal: [{host}]")][-1]


@pytest.fixture(scope="module")
def pair(gpu_pair_boxes) -> Pair:
    return gpu_pair_boxes


def test_a_layout_across_two_boxes_starts_every_rank_and_serves_from_rank_0(pair):
    replicas = pair.deploy("ep8")
    assert replicas.returncode == 0, replicas.output[-3000:]

    swapped = pair.deploy("tp16")
    assert swapped.returncode == 0, swapped.output[-4000:]
    for rank, box in enumerate(pair.boxes):
        assert (pair.active(box, "tp16"), pair.active(box, "ep8")) == ("active", "inactive")
        start = pair.show(box, "tp16", "ExecStart")
        assert f"--tp-size 16 --nnodes 2 --node-rank {rank} --dist-init-addr 127.0.0.1:{pair.dist_port} " in start
        assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in pair.show(box, "tp16", "Environment")
        assert {key: pair.fact(box)[key] for key in ("active_layout", "nnodes", "node_rank")} == {
            "active_layout": "tp16",
            "nnodes": 2,
            "node_rank": rank,
        }
    assert wait_http(pair.url(pair.a) + "/v1/models", 5) == 200  # rank 0 serves the API
    assert wait_http(pair.url(pair.b) + "/health_generate", 5) == 200  # rank 1 answers health only
    assert wait_http(pair.url(pair.b) + "/v1/models", 2) == 404

    again = pair.deploy("tp16")
    assert again.returncode == 0, again.output[-3000:]
    assert [again.changed(box.name) for box in pair.boxes] == [0, 0], again.stdout


def test_a_node_left_out_or_unlike_the_others_is_refused_before_anything_changes(pair):
    before = pair.pids("tp16")

    limited = pair.deploy("tp8x2", "--limit", pair.a.name)
    assert limited.returncode != 0
    assert f"{pair.b.name} is not in this run" in limited.output and "nothing was changed" in limited.output

    with changed_json(model_config(pair.b), num_hidden_layers=60):
        unlike = pair.deploy("tp8x2")
    assert unlike.returncode != 0
    assert "The nodes of tp8x2 differ: model files (config.json and safetensors index) differ" in unlike.output
    assert pair.pids("tp16") == before and [pair.active(box, "tp8x2") for box in pair.boxes] == ["inactive", "inactive"]


def test_a_rank_that_fails_to_load_rolls_every_node_back_each_with_its_own_diagnosis(pair):
    # Box b's GPUs really hold 70 GiB, though its record says 95: only loading finds out (on b, rank 1).
    with changed_json(pair.b.root / "etc" / "sglang-standin.json", gpu_memory_gib=70.0):
        failed = pair.deploy("tp8x2")
    assert failed.returncode != 0
    fatal = {box.name: fatal_line(failed.stdout, box.name) for box in pair.boxes}
    assert "did not start on " + pair.b.name + " (node rank 1 of 2)" in fatal[pair.b.name]
    assert "Cause: out of GPU memory" in fatal[pair.b.name]
    assert "did not start on " + pair.a.name + " (node rank 0 of 2)" in fatal[pair.a.name]
    assert "Cause: another node of this multi-node layout went away" in fatal[pair.a.name]
    assert "ncclRemoteError" in fatal[pair.a.name]
    assert all("Rolled back: sglang-k26-tp16.service is serving again" in line for line in fatal.values())
    for box in pair.boxes:
        assert (pair.active(box, "tp16"), pair.active(box, "tp8x2")) == ("active", "failed")
        assert pair.fact(box)["active_layout"] == "tp16"
    assert wait_http(pair.url(pair.a) + "/health_generate", 10) == 200


def test_a_rank_that_dies_later_takes_the_layout_down_on_every_node_and_status_shows_it(pair):
    pair.b.run("sudo", "kill", "-KILL", pair.show(pair.b, "tp16", "MainPID"))  # rank 1 dies, as in a crash
    deadline = time.monotonic() + 20
    while pair.active(pair.a, "tp16") != "failed" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [pair.active(box, "tp16") for box in pair.boxes] == ["failed", "failed"]
    journal = pair.a.run("sudo", "journalctl", "--no-pager", "--output=cat", "-u", unit("tp16"), "-n", "30").stdout
    assert "Connection closed by remote peer" in journal

    status = run_playbook("playbooks/status.yml", pair.inventory)
    assert status.returncode == 0, status.output[-3000:]
    assert status.stdout.count(f"failed: {unit('tp16')}") >= 2 and "running: nothing" in status.stdout

    back = pair.deploy("tp16")
    assert back.returncode == 0, back.output[-3000:]
    assert [pair.active(box, "tp16") for box in pair.boxes] == ["active", "active"]
    assert wait_http(pair.url(pair.a) + "/health_generate", 10) == 200
