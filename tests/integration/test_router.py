"""The REAL sglang-router from PyPI (no stand-in), deployed by playbooks/router.yml on a rehearsal box, in
front of two stand-in servers on that box (instances on GPU slices, taken from the inventory); and the
rolling swap of two managed boxes."""

from __future__ import annotations

import json
import threading
import urllib.request

from tests.rehearsal import box as boxes
from tests.rehearsal.bench import benchmarks
from tests.rehearsal.playbook import run_playbook
from tests.rehearsal.standin import BOX_WHEELHOUSE, emitted

UNIT = "sglang-router-k26.service"


def arrivals(url: str) -> int:
    return len(emitted(url)["arrivals"])


def generate(router: str, tokens: int = 4) -> int:
    """A streamed generation through the router: its HTTP status, or 0 when the stream broke off short
    (a stream cut mid-way cannot be retried elsewhere, so this is what a careless swap loses)."""
    body = {"text": "hello there", "stream": True, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(router + "/generate", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            done = 0
            for line in answer:
                if line.startswith(b"data: {"):
                    done = json.loads(line[6:])["meta_info"]["completion_tokens"]
            return answer.status if done == tokens else 0
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return 0


def round_robin_router(**extra: object) -> tuple[str, dict[str, object]]:
    """A free loopback port for the real router (round robin, installed from the box's wheelhouse) and its settings."""
    port = boxes.free_port()
    settings = {
        **extra,
        "sglang_router_port": port,
        "sglang_router_policy": "round_robin",
        "sglang_router_find_links": [BOX_WHEELHOUSE],
        "sglang_router_no_index": True,
    }
    return f"http://127.0.0.1:{port}", settings


def test_the_real_router_spreads_round_robin_over_two_instances_and_routes_around_a_dead_one(two_instances, tmp_path):
    """Two servers on one box (instances r0 and r1 on GPUs 0-3 and 4-7) as the router's workers, from the inventory."""
    both = two_instances
    box = both.box
    both.deploy("tp4").succeeded()
    router, settings = round_robin_router()
    where = ("-e", f"router_hosts={both.host('r0')}")
    try:
        run_playbook("playbooks/router.yml", both.inventory, settings, *where).succeeded()
        again = run_playbook("playbooks/router.yml", both.inventory, settings, *where).succeeded()
        assert again.changed(both.host("r0")) == 0, again.output[-3000:]
        unit = box.run("systemctl", "cat", UNIT).stdout
        assert f"--worker-urls {both.url('r0')} {both.url('r1')}" in unit
        assert "DynamicUser=yes" in unit and "PrivateDevices=yes" in unit

        before = (arrivals(both.url("r0")), arrivals(both.url("r1")))
        assert [generate(router) for _ in range(20)] == [200] * 20
        spread = (arrivals(both.url("r0")) - before[0], arrivals(both.url("r1")) - before[1])
        assert spread == (10, 10), spread  # round robin: every other request to each instance

        # The benchmark measures through the router like through any server.
        results = tmp_path / "results"
        done = benchmarks(
            *("run", "--url", router, "--levels", "4", "--output-tokens", "8", "--min-requests", "8", "--rounds", "1"),
            *("--layout", "2-instances", "--metrics-interval", "0", "--results-dir", str(results)),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        (path,) = results.rglob("*.json")
        assert json.loads(path.read_text())["levels"][0]["completed"] == 8

        # One instance dies (SIGKILL, as a crash): the router retries elsewhere and then routes around it.
        box.run("sudo", "systemctl", "kill", "--signal=SIGKILL", both.unit("tp4", "r1"))
        before = arrivals(both.url("r0"))
        assert [generate(router) for _ in range(10)] == [200] * 10
        assert arrivals(both.url("r0")) - before == 10
    finally:
        box.run("sudo", "systemctl", "disable", "--now", UNIT, check=False)


def test_bad_router_settings_are_refused_before_the_host_changes(provisioned):
    box = provisioned.box

    def unit_file() -> str:  # its content, or the error of its absence: either way it must not change
        done = box.run("cat", f"/etc/systemd/system/{UNIT}", check=False)
        return done.stdout + done.stderr

    before = unit_file()
    bad = provisioned.playbook(
        "playbooks/router.yml",
        "-e",
        f"router_hosts={box.name}",
        extra_vars={"sglang_router_worker_urls": ["http://10.0.0.7:30001 --api-key x"]},
    )
    assert bad.returncode != 0 and "must be a base URL http://HOST:PORT" in bad.output
    unknown = provisioned.playbook(
        "playbooks/router.yml", "-e", f"router_hosts={box.name}", extra_vars={"sglang_router_workers": ["nowhere"]}
    )
    assert unknown.returncode != 0 and "names nowhere, which have no sglang_port" in unknown.output
    assert unit_file() == before


def test_a_rolling_swap_of_two_boxes_behind_the_router_loses_no_request(gpu_pair_boxes, declared_vars):
    """ep8 -> tp8 on two managed boxes, one box at a time, while four clients keep sending through the router
    (on box a, in front of both boxes' layouts, as the inventory lists them)."""
    pair = gpu_pair_boxes
    # With /metrics the drain waits exactly until a replica has nothing running or queued.
    metrics = {"sglang_common_args": {**declared_vars["sglang_common_args"], "enable-metrics": True}}
    run_playbook("deploy.yml", pair.inventory, metrics, "-e", "layout=ep8").succeeded()
    router, settings = round_robin_router(**metrics)
    try:
        run_playbook("playbooks/router.yml", pair.inventory, settings, "-e", f"router_hosts={pair.a.name}").succeeded()
        statuses: list[int] = []
        stop = threading.Event()

        def client() -> None:
            while not stop.is_set() and len(statuses) < 5000:
                statuses.append(generate(router, tokens=32))

        clients = [threading.Thread(target=client) for _ in range(4)]
        for thread in clients:
            thread.start()
        try:
            rolled = run_playbook(
                "playbooks/rolling_deploy.yml", pair.inventory, settings, "-e", "layout=tp8", "-e", f"router_host={pair.a.name}"
            )
        finally:
            stop.set()
            for thread in clients:
                thread.join(timeout=60)
        rolled.succeeded()
        # One box at a time: a is back in the router before b leaves it.
        lines = rolled.stdout.splitlines()
        leaves = [at for at, line in enumerate(lines) if "Leave | Take the replica out of the router" in line]
        joins = [at for at, line in enumerate(lines) if "Join | Wait until the router routes to it" in line]
        assert len(leaves) == len(joins) == 2 and leaves[0] < joins[0] < leaves[1] < joins[1]
        assert len(statuses) > 20 and set(statuses) == {200}, sorted(set(statuses))
        assert [pair.active(box, "tp8") for box in pair.boxes] == ["active", "active"]
        assert [pair.active(box, "ep8") for box in pair.boxes] == ["inactive", "inactive"]
        with urllib.request.urlopen(router + "/workers", timeout=10) as answer:
            workers = json.loads(answer.read())["workers"]
        assert sorted(w["url"] for w in workers if w["is_healthy"]) == sorted(pair.url(box) for box in pair.boxes)
    finally:
        pair.a.run("sudo", "systemctl", "disable", "--now", UNIT, check=False)
