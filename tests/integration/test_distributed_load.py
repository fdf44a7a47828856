"""Load from two machines: Locust's own master/worker mode across two rehearsal boxes, through the real playbooks.

Both boxes get Locust from playbooks/loadgen.yml (the pinned release, from the test wheelhouse); the
stand-in server runs here on loopback, which the boxes share. Box a runs the master (at a free port, its
bench_master_port) and a worker, box b a worker; each box's raw records come back and are merged on one
clock, so the level's figures are those of one run. The same workload from here alone is the yardstick.

Held to what the server sent, it runs beside the other worker, not `alone`: three times in a row beside
box modules in another process (test_deploy.py and its neighbours), no test failed.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.rehearsal import box as boxes
from tests.rehearsal import standin
from tests.rehearsal.bench import benchmarks
from tests.rehearsal.playbook import run_playbook

# 96 tokens at 10 ms each: ~0.97 s a request, so that a reader's few ms of lag at a stream's end weigh
# little (with 32 tokens, a fresh CI machine measured one process 1.05% under two; with 96, beside a busy
# core, 1.76% under what the server sent); 8 users, 48 requests.
CLOSED = ("--levels", "8", "--output-tokens", "96", "--input-tokens", "16", "--min-requests", "48", "--metrics-interval", "0")


@dataclass
class Loadgens:
    a: boxes.Box
    b: boxes.Box
    inventory: Path

    @property
    def names(self) -> str:
        return f"{self.a.name},{self.b.name}"


@pytest.fixture(scope="module")
def loadgens(box_support, tmp_path_factory) -> Iterator[Loadgens]:
    directory = tmp_path_factory.mktemp("loadgens")
    with boxes.running_box() as a, boxes.running_box() as b:
        hosts = {}
        for box in (a, b):
            shutil.copytree(standin.wheelhouse(), box.root / standin.BOX_WHEELHOUSE.lstrip("/"), dirs_exist_ok=True)
            hosts[box.name] = {
                **box.inventory()["sglang_servers"]["hosts"][box.name],
                "sglang_loadgen_find_links": [standin.BOX_WHEELHOUSE],
                "sglang_loadgen_no_index": True,
            }
        hosts[a.name]["bench_master_port"] = boxes.free_port()
        inventory = directory / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"loadgens": {"hosts": hosts}}, sort_keys=False))
        installed = run_playbook("playbooks/loadgen.yml", inventory, {"loadgen_hosts": "loadgens"})
        assert installed.returncode == 0, installed.output[-4000:]
        again = run_playbook("playbooks/loadgen.yml", inventory, {"loadgen_hosts": "loadgens"})
        assert again.returncode == 0 and again.changed(a.name) == 0 and again.changed(b.name) == 0, again.stdout
        yield Loadgens(a, b, inventory)


def run(tmp_path: Path, name: str, url: str, *options: str) -> dict:
    results = tmp_path / name
    done = benchmarks("run", "--url", url, "--results-dir", str(results), *options, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = results.rglob("*.json")
    (level,) = json.loads(path.read_text())["levels"]
    return level


def test_two_load_generators_measure_what_one_does(loadgens, tmp_path):
    with standin.serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 10.0}) as url:
        here = run(tmp_path, "here", url, *CLOSED)
        spread = run(tmp_path, "spread", url, *CLOSED, "--inventory", str(loadgens.inventory), "--loadgen-hosts", loadgens.names)
        streams = standin.sent_streams(standin.emitted(url))
    assert here["status"] == spread["status"] == "ok"
    assert spread["completed"] == here["completed"] == 48
    assert spread["loadgen"]["processes"] == 2 and spread["loadgen"]["hosts"] == sorted([loadgens.a.name, loadgens.b.name])
    for level in (here, spread):  # each held to what the server sent in its own window
        assert level["decode_tok_s"]["p50"] == pytest.approx(standin.sent_decode_rate(streams, level["window"]), rel=0.02)
    assert spread["decode_tok_s"]["p50"] == pytest.approx(here["decode_tok_s"]["p50"], rel=0.02)
    assert spread["itl_ms"]["mean"] == pytest.approx(here["itl_ms"]["mean"], rel=0.01)
    # The aggregate also counts each user's gap between one request's end and its next: one process
    # with all eight users has a little more of it than two processes with four each (+1.2% seen in CI).
    assert spread["aggregate_tok_s"] == pytest.approx(here["aggregate_tok_s"], rel=0.03)
    assert spread["achieved_concurrency"] == pytest.approx(8, rel=0.05)  # on one clock: the two hosts' users overlap


def test_an_open_loop_schedule_split_across_two_machines_keeps_its_rate_and_burstiness(loadgens, tmp_path):
    rate, measured = 50.0, 300
    with standin.serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 1.0}) as url:
        level = run(
            tmp_path,
            "open",
            url,
            *("--endpoint", "generate", "--output-tokens", "4", "--input-tokens", "8", "--metrics-interval", "0"),
            *("--request-rates", f"{rate:g}", "--min-requests", str(measured), "--warmup", "20"),
            *("--inventory", str(loadgens.inventory), "--loadgen-hosts", loadgens.names, "--processes", "2"),
        )
        arrivals = sorted(standin.emitted(url)["arrivals"])
    assert level["status"] == "ok" and level["completed"] == measured
    assert level["loadgen"]["processes"] == 4 and len(level["loadgen"]["hosts"]) == 2
    assert level["arrival"]["achieved_rate"] == pytest.approx(level["arrival"]["planned_rate"], rel=0.02)
    assert level["arrival"]["lateness_ms"]["p99"] < 50
    seen = [t for t in arrivals if t >= level["window"][0]][:measured]
    gaps = np.diff(seen)
    assert len(gaps) / gaps.sum() == pytest.approx(rate, rel=0.06)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.12)
