"""The layout search on the rehearsal box, through the real playbooks, against the stand-in's known clock.

The simulated box follows the field notes' table (tests/rehearsal/gpu_host.py): the search must refuse
TP4 EP2 and TP2 EP4 without launching them, find EP8 best at C=1 and EP4 best at peak, leave the winner
serving, and survive a controller killed mid-search without measuring a candidate twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.alone import exclusive_turn
from tests.rehearsal.bench import benchmarks, benchmarks_argv, on_box, tool_env
from tests.rehearsal.gpu_host import GPU_HOST, true_aggregate_tok_s, true_decode_tok_s
from tests.rehearsal.playbook import REPO

WORKLOAD = ("--output-tokens", "32", "--rounds", "2", "--min-requests", "4", "--metrics-interval", "0")
KEYS = {
    "tp8": "tp8-ep1-pp1-dp1",
    "pp8": "tp1-ep1-pp8-dp1",
    "ep8": "tp8-ep8-pp1-dp1",
    "ep8-tuned": "tp8-ep8-pp1-dp1",
    "ep4": "tp8-ep4-pp1-dp1",
}


def search_args(provisioned, results: Path, *options: str) -> list[str]:
    return [
        "search",
        *on_box(provisioned.box.name, provisioned.inventory),
        "--results-dir",
        str(results),
        *WORKLOAD,
        *options,
    ]


def search(provisioned, results: Path, *options: str) -> subprocess.CompletedProcess:
    return benchmarks(*search_args(provisioned, results, *options), timeout=1200)


def the_manifest(results: Path) -> dict:
    (path,) = results.glob("*/searches/*.json")
    return json.loads(path.read_text())


def serving(provisioned) -> str:
    fact = provisioned.box.root / "etc" / "ansible" / "facts.d" / "sglang_service.fact"
    return json.loads(fact.read_text())["active_layout"]


def records(results: Path, candidate: str) -> list[Path]:
    return [p for p in results.glob(f"*/{candidate}/*.json") if not p.name.startswith(".")]


@pytest.fixture(scope="module")
def searched(provisioned, tmp_path_factory):
    results = tmp_path_factory.mktemp("search")
    with exclusive_turn():  # each candidate held to the stand-in's clock (tests/alone.py)
        done = search(provisioned, results, "--levels", "1,16,64")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    return done, results, the_manifest(results)


def test_preflight_refuses_the_field_failures_and_they_are_never_launched(searched):
    done, results, state = searched
    by_name = {entry["name"]: entry for entry in state["candidates"]}
    assert by_name["tp4ep2"]["status"] == "refused" and "out of memory" in " ".join(by_name["tp4ep2"]["reasons"])
    assert by_name["tp2ep4"]["status"] == "refused" and "ep 4 does not divide tp 2" in " ".join(by_name["tp2ep4"]["reasons"])
    for name in ("tp4ep2", "tp2ep4"):
        assert f"{name} ({name}): deploying" not in done.stdout
        assert not records(results, name)
    assert {name for name, entry in by_name.items() if entry["status"] == "measured"} == set(KEYS)


def test_each_candidate_is_measured_on_the_stand_ins_clock(searched):
    _, results, state = searched
    for entry in state["candidates"]:
        if entry["status"] != "measured":
            continue
        key = KEYS[entry["name"]]
        assert entry["scores"]["c1"] == pytest.approx(true_decode_tok_s(key, 1), rel=0.02), entry["name"]
        # The roofline, with each request's first token after its prefill rather than one inter-token time.
        truth = true_aggregate_tok_s(key, entry["scores"]["peak_c"], 32)
        assert entry["scores"]["peak"] == pytest.approx(truth, rel=0.04), entry["name"]
        assert entry["load_s"] >= GPU_HOST["load_seconds"]
        # The stand-in nvidia-smi: each of the 8 GPUs 88% held (--mem-fraction-static 0.88), as SGLang reserves it.
        assert entry["gpu_used_mib"] == pytest.approx(8 * 0.88 * GPU_HOST["gpu_memory_gib"] * 1024, rel=0.01)
        assert len(records(results, entry["name"])) == 1  # one launch, one run record with all its levels


def test_the_winners_follow_the_clock_and_the_peak_winner_is_left_serving(searched, provisioned):
    done, _, state = searched
    assert state["winners"]["c1"]["name"] in ("ep8", "ep8-tuned")  # the same EP8 clock: a tie, said to be unclear
    assert state["winners"]["peak"]["name"] == "ep4" and state["winners"]["peak"]["clear"]
    assert state["winners"]["peak"]["runner_up"] in ("ep8", "ep8-tuned")
    assert state["serving_at_end"] == "ep4" == serving(provisioned)
    assert "sglang_layouts:\n  ep4:\n" in done.stdout and "winner peak: ep4" in done.stdout


def test_the_knee_skips_levels_past_saturation(searched):
    _, _, state = searched
    by_name = {entry["name"]: entry for entry in state["candidates"]}
    # PP8 saturates at 396 tok/s by C=16 (37 tok/s x 16 > 396): C=64 adds nothing, and the knee says so.
    assert by_name["pp8"]["stopped"].startswith("knee: C=64 gained")


def test_the_report_and_compare_read_the_search(searched):
    _, results, _ = searched
    (markdown,) = results.glob("*/searches/*.md")
    assert "## Winners" in markdown.read_text() and markdown.with_suffix(".png").stat().st_size > 10_000
    compared = benchmarks("compare", str(results))
    assert compared.returncode == 0, compared.stderr
    assert all(name in compared.stdout for name in KEYS) and "skipped" not in compared.stdout + compared.stderr


def test_running_the_same_search_again_launches_nothing(searched, provisioned):
    _, results, state = searched
    again = search(provisioned, results, "--levels", "1,16,64")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "0 to launch, 2 refused by preflight, 5 kept from the earlier run" in again.stdout
    assert the_manifest(results)["id"] == state["id"]
    assert all(len(records(results, name)) == 1 for name in KEYS)


def test_a_killed_controller_costs_at_most_the_candidate_in_progress(provisioned, tmp_path):
    provisioned.playbook("deploy.yml", "-e", "layout=tp8").succeeded()
    results = tmp_path / "results"
    options = ("--layouts", "ep8", "--grid", "max-running-requests=8,64", "--levels", "1,16", "--leave", "original")
    process = subprocess.Popen(
        benchmarks_argv(*search_args(provisioned, results, *options)),
        cwd=REPO,
        env=tool_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    first = ""
    while time.monotonic() < deadline:
        time.sleep(0.5)
        found = list(results.glob("*/searches/*.json"))
        statuses = [(e["name"], e["status"]) for e in json.loads(found[0].read_text())["candidates"]] if found else []
        if len(statuses) == 2 and statuses[0][1] == "measured" and statuses[1][1] == "running":
            first = statuses[0][0]
            break
    assert first, "the search never got to its second candidate"
    # The controller dies with everything it started (as when its machine goes down): no clean-up runs.
    victims = [process.pid, *(child.pid for child in psutil.Process(process.pid).children(recursive=True))]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=30)

    resumed = search(provisioned, results, *options)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "1 to launch, 0 refused by preflight, 1 kept from the earlier run" in resumed.stdout
    state = the_manifest(results)
    assert [e["status"] for e in state["candidates"]] == ["measured", "measured"]
    assert len(records(results, first)) == 1  # measured once, before the kill
    second = state["candidates"][1]["name"]
    assert len(records(results, second)) == 1
    # max-running-requests 8 queues half of C=16: 8 x 65 = 519 tok/s; 64 lets all 16 run up to the 961 roofline.
    peaks = {e["overrides"]["max-running-requests"]: e["scores"]["peak"] for e in state["candidates"]}
    assert peaks[8] == pytest.approx(8 * true_decode_tok_s("tp8-ep8-pp1-dp1", 8), rel=0.04)
    assert peaks[64] == pytest.approx(GPU_HOST["peak_tok_s"]["tp8-ep8-pp1-dp1"], rel=0.04)
    deeper = next(e["name"] for e in state["candidates"] if e["overrides"]["max-running-requests"] == 64)
    assert state["winners"]["peak"]["name"] == deeper
    assert state["original_layout"] == "tp8" and state["serving_at_end"] == "tp8" == serving(provisioned)


@pytest.mark.alone  # held to the stand-in's clock (tests/alone.py)
def test_the_slo_capacity_is_narrowed_to_the_clocks_truth(provisioned, tmp_path):
    """EP4's TPOT is max(22.2 ms, C / 1,531 tok/s): within 31 ms up to C = 47.5. Levels 1, 16, 64 bracket it;
    bisection on the same launch narrows the bracket to 10% around the truth."""
    results = tmp_path / "results"
    done = search(
        provisioned,
        results,
        "--layouts",
        "ep4",
        "--levels",
        "1,16,64",
        "--slo",
        "tpot_p99=31",
        "--objective",
        "capacity",
        "--leave",
        "none",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (entry,) = the_manifest(results)["candidates"]
    low, high = entry["scores"]["capacity_bracket"]
    assert entry["scores"]["capacity_c"] == low and low < 47.5 < high + 1 and high - low <= max(1, int(0.1 * low))
    assert {1, 16, 64} < set(entry["levels_run"])  # and the probes between 16 and 64
    assert entry["stopped"].startswith("C=64 broke the SLO (tpot_p99)")
    assert the_manifest(results)["winners"]["capacity"]["name"] == "ep4"


def test_a_candidate_that_fails_to_start_is_diagnosed_and_the_search_goes_on(provisioned, tmp_path):
    """The simulated weights grow to 600 GiB (75 GiB per GPU) where preflight's estimate from config.json says 553:
    at mem-fraction-static 0.78 the stand-in has 74.1 GiB per GPU and runs out of memory loading; at 0.88 it fits."""
    sim_file = provisioned.box.root / "etc" / "sglang-standin.json"
    sim_file.write_text(json.dumps({**GPU_HOST, "weights_gib": 600}))
    try:
        results = tmp_path / "results"
        done = search(
            provisioned,
            results,
            "--layouts",
            "ep8",
            "--grid",
            "mem-fraction-static=0.78,0.88",
            "--levels",
            "1",
            "--leave",
            "none",
        )
    finally:
        sim_file.write_text(json.dumps(GPU_HOST))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    by_fraction = {e["overrides"]["mem-fraction-static"]: e for e in the_manifest(results)["candidates"]}
    failed, measured = by_fraction[0.78], by_fraction[0.88]
    assert failed["status"] == "failed_to_start" and "cause: out of gpu memory" in failed["error"].lower()
    assert "Rolled back" in failed["error"] or "nothing serves" in failed["error"].lower()
    assert measured["status"] == "measured" and measured["scores"]["c1"] > 0
    assert the_manifest(results)["winners"]["c1"]["name"] == measured["name"]
