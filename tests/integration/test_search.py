"""The layout search on the rehearsal box, through the real playbooks, against the stand-in's known clock.

The simulated box follows the field notes' table (tests/rehearsal/gpu_host.py): the search must refuse
TP4 EP2 and TP2 EP4 without launching them, find EP8 best at C=1 and EP4 best at peak, leave the winner
serving, and survive a controller killed mid-search without measuring a candidate twice.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.alone import exclusive_turn
from tests.rehearsal.bench import benchmarks, on_box
from tests.rehearsal.gpu_host import GPU_HOST, true_aggregate_tok_s, true_decode_tok_s

WORKLOAD = ("--output-tokens", "32", "--rounds", "2", "--min-requests", "4", "--metrics-interval", "0")
# The knee at 25%: with 32-token requests each user's turnaround holds C=16 under the roofline by 5-15%
# (more on a slower machine), which C=64's queue fills; a layout with room left gains 50% or more.
SEARCHED = ("--levels", "1,16,64", "--knee", "0.25")
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
        done = search(provisioned, results, *SEARCHED)
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
    # The installed SGLang judged every candidate too (the stand-in's entry points): it takes tp2ep4's arguments
    # (the real one fails later, at model init), so the two verdicts differ and the record says so.
    assert by_name["tp2ep4"]["sglang"]["accepted"] and not by_name["tp2ep4"]["sglang"]["agrees_with_ours"]
    assert all(by_name[name]["sglang"]["accepted"] for name in KEYS)
    assert "what the installed SGLang will really run (its own checks, before any launch):" in done.stdout


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
    # PP8 saturates at 396 tok/s by C=16 (37 tok/s x 16 > 396): C=64 adds little, and the knee says so;
    # EP4 (45 tok/s x 16 = 720 of its 1,531) and TP8 (26 x 16 = 421 of 808) had room left, and no knee.
    assert by_name["pp8"]["stopped"].startswith("knee: C=64 gained")
    assert not by_name["ep4"]["stopped"].startswith("knee") and not by_name["tp8"]["stopped"].startswith("knee")


def test_the_report_and_compare_read_the_search(searched):
    _, results, _ = searched
    (markdown,) = results.glob("*/searches/*.md")
    assert "## Winners" in markdown.read_text() and markdown.with_suffix(".png").stat().st_size > 10_000
    compared = benchmarks("compare", str(results))
    assert compared.returncode == 0, compared.stderr
    assert all(name in compared.stdout for name in KEYS) and "skipped" not in compared.stdout + compared.stderr


def test_running_the_same_search_again_launches_nothing(searched, provisioned):
    _, results, state = searched
    again = search(provisioned, results, *SEARCHED)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "0 to launch, 2 refused by preflight, 5 kept from the earlier run" in again.stdout
    assert the_manifest(results)["id"] == state["id"]
    assert all(len(records(results, name)) == 1 for name in KEYS)


@pytest.mark.alone  # held to the stand-in's clock (tests/alone.py)
def test_the_slo_capacity_is_narrowed_to_the_clocks_truth(provisioned, tmp_path):
    """EP4's TPOT is max(22.2 ms, C / 1,531 tok/s): within 31 ms up to C = 47.5. Levels 1, 16, 64 bracket it;
    bisection on the same launch narrows the bracket to 10% (of its width) at or below the truth."""
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
    assert entry["scores"]["capacity_c"] == low and high - low <= max(1, int(0.1 * low))
    # A loaded machine only adds to a TPOT (late wake-ups, a late reader), so the bracket can sit below the
    # truth, never above it: a fresh CI machine found 43-46 once. Within 15% below, and never past it.
    assert low < 47.5 and high + 1 > 0.85 * 47.5
    assert {1, 16, 64} < set(entry["levels_run"])  # and the probes between 16 and 64
    assert entry["stopped"].startswith("C=64 broke the SLO (tpot_p99)")
    assert the_manifest(results)["winners"]["capacity"]["name"] == "ep4"
