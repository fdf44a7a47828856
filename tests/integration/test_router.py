"""The REAL routers from PyPI (no stand-in): smg (the default) and sglang-router 0.3.2, deployed by
playbooks/router.yml on a rehearsal box in front of two stand-in servers on that box (instances on GPU
slices, taken from the inventory); and keyed rolling swaps of two managed boxes behind each."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from tests.rehearsal import box as boxes
from tests.rehearsal.bench import benchmarks
from tests.rehearsal.playbook import run_playbook
from tests.rehearsal.standin import BOX_WHEELHOUSE, emitted

UNIT = "sglang-router-k26.service"
# The servers' and the router's key in the keyed tests (sglang_api_key, as from Vault).
KEY = "router-test-key-" + "7f" * 12


def arrivals(url: str, key: str = "") -> int:
    if not key:
        return len(emitted(url)["arrivals"])
    request = urllib.request.Request(url + "/standin/emitted", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as answer:  # the stand-in's own log, behind its key
        return len(json.loads(answer.read())["arrivals"])


def generate(router: str, tokens: int = 4, key: str = "") -> int:
    """A streamed generation through the router: its HTTP status, or 0 when the stream broke off short
    (a stream cut mid-way cannot be retried elsewhere, so this is what a careless swap loses)."""
    body = {"text": "hello there", "stream": True, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
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


def listing(router: str, key: str = "") -> tuple[int, str]:
    """GET /v1/models through the router: its status and, when 200, the body."""
    request = urllib.request.Request(router + "/v1/models", headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def round_robin_router(**extra: object) -> tuple[str, dict[str, object]]:
    """Free loopback ports for the real router (round robin, installed from the box's wheelhouse) and its settings."""
    port = boxes.free_port()
    settings = {
        **extra,
        "sglang_router_port": port,
        "sglang_router_metrics_port": boxes.free_port(),
        "sglang_router_policy": "round_robin",
        "sglang_router_find_links": [BOX_WHEELHOUSE],
        "sglang_router_no_index": True,
    }
    return f"http://127.0.0.1:{port}", settings


def test_the_real_router_spreads_round_robin_over_two_instances_and_routes_around_a_dead_one(two_instances, tmp_path):
    """smg, the default, with two servers on one box (instances r0 and r1 on GPUs 0-3 and 4-7) as its workers, from
    the inventory; its metrics on loopback; status.yml shows its view of each worker."""
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
        assert "sglang_router_launch.py smg.launch_router" in unit and "LoadCredential" not in unit
        metrics = settings["sglang_router_metrics_port"]
        assert f"127.0.0.1:{metrics} " in box.run("ss", "-ltnH").stdout  # Prometheus on loopback only
        assert "smg_" in box.run("curl", "-sf", f"http://127.0.0.1:{metrics}/metrics").stdout

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
        view = run_playbook("playbooks/status.yml", both.inventory, settings, *where).succeeded().stdout
        assert f"{both.url('r0')}: routed to" in view, view[-3000:]
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


def test_a_router_that_does_not_route_is_not_left_running(two_instances):
    """A router whose replicas never answer fails the play saying why; the router it replaced runs again, or,
    when there was none, it is stopped and disabled (it was once left running, answering 503)."""
    both = two_instances
    box = both.box
    router, settings = round_robin_router(sglang_router_workers=[], sglang_router_health_timeout=6)
    where = ("-e", f"router_hosts={both.host('r0')}")
    good = {**settings, "sglang_router_worker_urls": [both.url("r0")]}
    dead = {**settings, "sglang_router_worker_urls": ["http://127.0.0.1:9"]}
    try:
        run_playbook("playbooks/router.yml", both.inventory, good, *where).succeeded()
        failed = run_playbook("playbooks/router.yml", both.inventory, dead, *where)
        assert failed.returncode != 0 and "did not route a generation within 6 s" in failed.output, failed.output[-3000:]
        assert "The previous router runs again." in failed.output
        assert both.url("r0") in box.run("systemctl", "cat", UNIT).stdout and generate(router) == 200

        box.run("sudo", "systemctl", "disable", "--now", UNIT)
        box.run("sudo", "rm", f"/etc/systemd/system/{UNIT}")
        box.run("sudo", "systemctl", "daemon-reload")
        failed = run_playbook("playbooks/router.yml", both.inventory, dead, *where)
        assert failed.returncode != 0 and "It was stopped." in failed.output, failed.output[-3000:]
        assert box.run("systemctl", "is-active", UNIT, check=False).stdout.strip() == "inactive"
        assert box.run("systemctl", "is-enabled", UNIT, check=False).stdout.strip() == "disabled"
    finally:
        box.run("sudo", "systemctl", "disable", "--now", UNIT, check=False)


def on_box_processes(box: boxes.Box) -> str:
    """Every process's command line and environment in the box (read there; the command itself names no key)."""
    listing = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; tr '\\0' ' ' < $p/environ; echo; done 2>/dev/null"
    return box.run("sudo", "sh", "-c", listing, check=False).stdout


@pytest.mark.parametrize(("package", "before", "after"), [("smg", "ep8", "tp8"), ("sglang-router", "tp8", "ep8")])
def test_a_keyed_rolling_swap_behind_the_real_router_loses_no_stream_and_unkeyed_clients_never_reach_a_replica(
    gpu_pair_boxes, declared_vars, package, before, after
):
    """before -> after on two managed boxes keyed with sglang_api_key, one box at a time, while four keyed clients
    keep sending through the router (on box a, in front of both boxes' layouts) and one without the key floods
    it: the router answers that one 401 itself, so no replica sees it or counts it against a worker, and the
    keyed ones are never refused. The key is on no command line, in no environment, unit, journal or output."""
    pair = gpu_pair_boxes
    # With /metrics the drain waits exactly until a replica has nothing running or queued.
    keyed = {"sglang_common_args": {**declared_vars["sglang_common_args"], "enable-metrics": True}, "sglang_api_key": KEY}
    outputs = [run_playbook("deploy.yml", pair.inventory, keyed, "-e", f"layout={before}").succeeded().output]
    router, settings = round_robin_router(**keyed, sglang_router_package=package)
    where = ("-e", f"router_hosts={pair.a.name}")
    try:
        outputs.append(run_playbook("playbooks/router.yml", pair.inventory, settings, *where).succeeded().output)
        keyed_statuses: list[int] = []
        unkeyed_statuses: list[int] = []
        stop = threading.Event()

        def client(statuses: list[int], key: str) -> None:
            while not stop.is_set() and len(statuses) < 5000:
                statuses.append(generate(router, tokens=32 if key else 1, key=key))

        clients = [threading.Thread(target=client, args=(keyed_statuses, KEY)) for _ in range(4)]
        clients.append(threading.Thread(target=client, args=(unkeyed_statuses, "")))
        for thread in clients:
            thread.start()
        try:
            rolled = run_playbook(
                "playbooks/rolling_deploy.yml",
                pair.inventory,
                settings,
                "-e",
                f"layout={after}",
                "-e",
                f"router_host={pair.a.name}",
            )
        finally:
            stop.set()
            for thread in clients:
                thread.join(timeout=60)
        outputs.append(rolled.succeeded().output)
        # One box at a time: a is back in the router before b leaves it.
        lines = rolled.stdout.splitlines()
        leaves = [at for at, line in enumerate(lines) if "Leave | Take the replica out of the router" in line]
        joins = [at for at, line in enumerate(lines) if "Join | Wait until the router routes to it" in line]
        assert len(leaves) == len(joins) == 2 and leaves[0] < joins[0] < leaves[1] < joins[1]
        assert len(keyed_statuses) > 20 and set(keyed_statuses) == {200}, sorted(set(keyed_statuses))
        assert len(unkeyed_statuses) > 20 and set(unkeyed_statuses) == {401}, sorted(set(unkeyed_statuses))
        assert [pair.active(box, after) for box in pair.boxes] == ["active", "active"]
        assert [pair.active(box, before) for box in pair.boxes] == ["inactive", "inactive"]

        # A flood without the key reaches no replica; keyed clients right after it are served.
        served = sum(arrivals(pair.url(box), KEY) for box in pair.boxes)
        assert [generate(router, key="") for _ in range(30)] == [401] * 30
        assert sum(arrivals(pair.url(box), KEY) for box in pair.boxes) == served
        assert [generate(router, key=KEY) for _ in range(6)] == [200] * 6
        # Both packages answer the model list without the key (roles/sglang_router/README.md, Keys): it names
        # the served model and nothing else. Pinned, so that a release that puts it behind the key is noticed.
        status, body = listing(router, key="")
        models = json.loads(body)["data"] if status == 200 else []
        assert status == 200 and models and {model["object"] for model in models} == {"model"}, (package, status)
        assert KEY not in body and listing(router, key=KEY)[0] == 200

        if package == "smg":  # a plain swap behind the router registers the swapped replica afresh
            plain = run_playbook(
                "deploy.yml",
                pair.inventory,
                settings,
                "-e",
                f"layout={before}",
                "-e",
                f"target={pair.b.name}",
                "-e",
                f"router_host={pair.a.name}",
            )
            outputs.append(plain.succeeded().output)
            assert "Join | Take its old registration out" in plain.stdout and "Join | Register the replica" in plain.stdout
            assert [generate(router, key=KEY) for _ in range(6)] == [200] * 6
        view = run_playbook("playbooks/status.yml", pair.inventory, settings, *where).succeeded().output
        outputs.append(view)
        assert all(f"{pair.url(box)}: routed to" in view for box in pair.boxes), view[-3000:]

        unit = pair.a.run("systemctl", "cat", UNIT).stdout
        assert "LoadCredential=sglang-secrets.yaml:/etc/sglang/secrets/router/k26.yaml" in unit
        journal = pair.a.run("sudo", "journalctl", "-u", UNIT, "--no-pager").stdout
        seen = {"unit": unit, "journal": journal, "processes": on_box_processes(pair.a), "output": "\n".join(outputs)}
        assert [where for where, text in seen.items() if KEY in text] == []
    finally:
        pair.a.run("sudo", "systemctl", "disable", "--now", UNIT, check=False)
