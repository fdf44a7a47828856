"""Each bottleneck rule (benchmarks/bottleneck.py) against the stand-in driven into that state, and a level
where none holds: the server-side rules through `python -m benchmarks run --url` on a local stand-in, PCIe
from the stand-in nvidia-smi's dmon sampling a loaded tp8 stand-in. (GPU compute is checked on the rehearsal
box, where the benchmark samples the GPUs itself: test_benchmark_truth.py. The load generator's rule is a
unit test: driving one of this machine's two cores to 70% on purpose would be a test of the machine.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks import bottleneck, gpu_telemetry
from tests.rehearsal.bench import benchmarks
from tests.rehearsal.standin import NVIDIA_SMI, serving_locally

FAST = ["--input-tokens", "8", "--min-requests", "8", "--rounds", "2", "--level-timeout", "60", "--metrics-interval", "0.1"]


def measured(url: str, results: Path, *options: str) -> dict:
    done = benchmarks("run", "--url", url, "--layout", "state", "--results-dir", str(results), *FAST, *options, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = results.rglob("*.json")
    run = json.loads(path.read_text())
    return {"run": run, "stdout": done.stdout, "levels": {level["concurrency"]: level for level in run["levels"]}}


def test_a_queue_at_max_running_requests_is_the_scheduler_cap_and_one_request_is_not_identified(tmp_path):
    with serving_locally(tmp_path, "--enable-metrics", "--max-running-requests", "4", itl_ms={"default": 10.0}) as url:
        found = measured(url, tmp_path / "r", "--levels", "1,16", "--output-tokens", "48")
    capped, alone = found["levels"][16]["bottleneck"], found["levels"][1]["bottleneck"]
    assert capped["name"] == "scheduler cap" and "at max-running-requests 4" in capped["evidence"], capped
    assert alone["name"] == "not identified" and "no GPU telemetry" in alone["evidence"], alone
    assert "C=16 held back by scheduler cap: " in found["stdout"]


def test_a_kv_cache_too_small_retracts_requests_and_is_named(tmp_path):
    """--max-total-tokens 256 (the stand-in holds 8 prompt tokens and each token generated): 16 requests of 64."""
    with serving_locally(tmp_path, "--enable-metrics", "--max-total-tokens", "256", kv_prompt_tokens=8) as url:
        found = measured(url, tmp_path / "r", "--levels", "16", "--output-tokens", "64")
    level = found["levels"][16]
    assert level["server_metrics"]["retracted"] >= 1 and level["server_metrics"]["max_token_usage"] >= 0.95
    assert level["bottleneck"]["name"] == "KV cache full", level["bottleneck"]


def test_tp8_all_reduce_traffic_near_the_link_is_pcie(tmp_path):
    """The stand-in nvidia-smi's dmon samples a tp8 stand-in under 16 requests whose all-reduces are sized to
    fill most of a Gen5 x16 link; the rules name PCIe from those samples alone (no queue, no KV limit).
    An idle tp8 stand-in of another simulated box (its own simulation file) runs beside it on this host, as
    other tests' servers do under xdist: dmon must not count it (it once did, and named nothing)."""
    simulation = {"itl_ms": {"default": 20.0}, "peak_tok_s": {"default": 800.0}, "pcie_kb_per_token": 120_000.0}
    (tmp_path / "neighbour").mkdir()
    with (
        serving_locally(tmp_path, "--tp-size", "8", **simulation) as url,
        serving_locally(tmp_path / "neighbour", "--tp-size", "8"),
    ):
        stop = threading.Event()

        def client() -> None:
            body = json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}).encode()
            while not stop.is_set():
                request = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
                urllib.request.urlopen(request, timeout=30).read()

        clients = [threading.Thread(target=client) for _ in range(16)]
        for thread in clients:
            thread.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # sample once all 16 decode (STAND-IN only: its /standin/load)
                with urllib.request.urlopen(url + "/standin/load", timeout=10) as answer:
                    load = json.loads(answer.read())
                if load["running"] == 16 and load["tok_s"] > 0:
                    break
                time.sleep(0.2)
            env = {**os.environ, "SGLANG_STANDIN_CONFIG": str(tmp_path / "sim.json")}
            argv = [sys.executable, str(NVIDIA_SMI), "dmon", "-s", "putm", "-d", "1", "-o", "DT", "-c", "3"]
            sampled = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
        finally:
            stop.set()
            for thread in clients:
                thread.join(timeout=60)
    gpus = gpu_telemetry.summarize(gpu_telemetry.parse_dmon(sampled), 1)
    assert sorted(gpus["per_gpu"]) == [str(i) for i in range(8)] and gpus["samples"] == 3
    level = {"server_metrics": {"num_running_reqs": 16.0, "num_queue_reqs": 0.0, "max_running_reqs": 16.0}, "gpus": gpus}
    link = gpu_telemetry.link_mb_s({"pcie_gen": 5, "pcie_width": 16})
    found = bottleneck.bottleneck(level, link_mb_s=link)
    assert found["name"] == "PCIe" and "of its link both ways (126,032 MB/s)" in found["evidence"], found
