"""Several servers on one box: two instances on their own GPU slices and ports, deployed and swapped through the
real playbooks on a rehearsal box; each swap touches only its own instance; collisions are refused before any
change (tests/rehearsal/instances.py)."""

from __future__ import annotations

import json

from tests.rehearsal import box as boxes
from tests.rehearsal.bench import benchmarks, on_box
from tests.rehearsal.playbook import run_playbook
from tests.rehearsal.standin import wait_http


def test_two_instances_share_a_box_on_their_own_gpus_and_swap_alone(two_instances, provisioned, tmp_path):
    both = two_instances
    both.deploy("tp4").succeeded()
    for instance, gpus in (("r0", "0,1,2,3"), ("r1", "4,5,6,7")):
        assert both.show("tp4", instance, "ActiveState") == "active"
        assert f"CUDA_VISIBLE_DEVICES={gpus}" in both.show("tp4", instance, "Environment")
        assert wait_http(both.url(instance) + "/health_generate", 10) == 200
        assert both.fact(instance)["active_layout"] == "tp4" and both.fact(instance)["port"] == both.ports[instance]
    r0_pid = both.show("tp4", "r0", "MainPID")

    # r1 alone swaps to another layout; r0 keeps serving, the same process throughout.
    swap = both.deploy("tp4ep4", "r1").succeeded()
    assert "Swapping sglang-k26-tp4.r1.service -> sglang-k26-tp4ep4.r1.service" in swap.stdout
    assert both.show("tp4", "r1", "ActiveState") == "inactive" and both.show("tp4ep4", "r1", "ActiveState") == "active"
    assert both.show("tp4", "r0", "MainPID") == r0_pid and wait_http(both.url("r0") + "/health_generate", 10) == 200
    again = both.deploy("tp4ep4", "r1").succeeded()
    assert again.changed(both.host("r1")) == 0, again.output[-3000:]

    # Two instances on the same GPUs or port: refused before anything changes, naming both and the fix.
    for clash, words in (
        ({"sglang_gpu_ids": "2-5"}, "share GPU 2, 3, 4, 5 of one machine"),
        ({"sglang_port": 30555}, "both listen on port 30555"),
    ):
        refused = run_playbook("deploy.yml", both.inventory, clash, "-e", "layout=tp4")
        assert refused.returncode != 0 and words in refused.output, refused.output[-3000:]
    # A layout of the whole machine (the box's own inventory, no instance) would need the instances' GPUs:
    # refused before it stops anything, naming the unit that holds them and how to free it.
    whole = provisioned.playbook("deploy.yml", "-e", "layout=ep8")
    assert whole.returncode != 0 and "unit sglang-k26-tp4.r0.service" in whole.output and "playbooks/stop.yml" in whole.output
    assert both.show("tp4", "r0", "MainPID") == r0_pid and both.show("tp4ep4", "r1", "ActiveState") == "active"

    status = run_playbook("playbooks/status.yml", both.inventory, None, "--limit", both.host("r1")).succeeded()
    assert "instance: r1" in status.stdout and "active layout: tp4ep4" in status.stdout

    # The benchmark finds the instance's own record: its port, layout and unit.
    results = tmp_path / "results"
    done = benchmarks(
        "run",
        *on_box(both.host("r1"), both.inventory),
        *("--levels", "1", "--output-tokens", "8", "--min-requests", "4", "--rounds", "1", "--metrics-interval", "0"),
        *("--results-dir", str(results)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = results.rglob("*.json")
    run = json.loads(path.read_text())
    server = run["server"]
    assert (server["layout"], server["unit"]) == ("tp4ep4", "sglang-k26-tp4ep4.r1.service")
    assert server["url"].endswith(f":{both.ports['r1']}")
    # Its GPUs only were sampled during the level: r1's slice, 4-7 (its unit's CUDA_VISIBLE_DEVICES).
    assert sorted(run["levels"][0]["gpus"]["per_gpu"]) == ["4", "5", "6", "7"]


def test_a_bad_instance_is_refused_naming_the_field(provisioned, tmp_path):
    bad = run_playbook(
        "deploy.yml",
        provisioned.inventory,
        {"sglang_instance": "r0 --port 1", "sglang_port": boxes.free_port()},
        "-e",
        "layout=ep8",
    )
    assert bad.returncode != 0 and "sglang_instance" in bad.output and "Nothing was changed" in bad.output
