"""The search over two identical rehearsal boxes: candidates in parallel, one per host, after checking the hosts alike.

The two provisioned GPU boxes of tests/rehearsal/gpu_pair.py, each simulating the field notes' box: the
stand-in's clock is the yardstick for the figures, and the candidates' own durations (what one host would
spend on them in a row) for the wall time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rehearsal.bench import benchmarks
from tests.rehearsal.gpu_host import true_decode_tok_s
from tests.rehearsal.gpu_pair import Pair, changed_json, model_config

ONE_BOX = {"tp8": "tp8-ep1-pp1-dp1", "pp8": "tp1-ep1-pp8-dp1", "ep8": "tp8-ep8-pp1-dp1", "ep4": "tp8-ep4-pp1-dp1"}
CANDIDATES = ",".join([*ONE_BOX, "tp16"])
# No GPU sampling (about a second more per level): test_benchmark_truth.py checks it.
WORKLOAD = ("--levels", "1,16", "--output-tokens", "16", "--rounds", "2", "--min-requests", "4")
WORKLOAD += ("--metrics-interval", "0", "--gpu-interval", "0")


def search(pair: Pair, results: Path, hosts: str, *options: str, layouts: str = CANDIDATES):
    done = benchmarks(
        "search",
        *("--server-hosts", hosts, "--inventory", str(pair.inventory), "--results-dir", str(results)),
        *("--layouts", layouts, *WORKLOAD),
        *options,
        timeout=1200,
    )
    return done


def manifest(results: Path) -> dict:
    (path,) = results.glob("*/searches/*.json")
    return json.loads(path.read_text())


def test_hosts_that_differ_are_refused_before_anything_changes(gpu_pair_boxes, tmp_path):
    pair = gpu_pair_boxes
    before = [pair.show(box, layout, "MainPID") for box in pair.boxes for layout in ("tp8", "ep8")]
    with changed_json(model_config(pair.b), num_hidden_layers=60):
        done = search(pair, tmp_path / "r", f"{pair.a.name},{pair.b.name}")
    assert done.returncode == 2
    assert "the hosts differ" in done.stderr and "model files (config.json and safetensors index) differ" in done.stderr
    assert [pair.show(box, layout, "MainPID") for box in pair.boxes for layout in ("tp8", "ep8")] == before


def test_two_hosts_search_in_parallel_and_find_what_one_finds_sooner(gpu_pair_boxes, tmp_path):
    pair = gpu_pair_boxes
    # tp16 spans both boxes: searched on one of them it is refused before anything launches, with the fix.
    one = search(pair, tmp_path / "one", pair.a.name, layouts="tp16")
    assert one.returncode == 1, one.stdout[-3000:] + one.stderr[-2000:]  # nothing measured
    (lone,) = manifest(tmp_path / "one")["candidates"]
    assert lone["status"] == "refused" and f"Fix: --server-hosts {pair.a.name},{pair.b.name}" in lone["reasons"][0]

    two = search(pair, tmp_path / "two", f"{pair.a.name},{pair.b.name}")
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-2000:]
    fleet = manifest(tmp_path / "two")
    by_name = {entry["name"]: entry for entry in fleet["candidates"]}
    # On both hosts, tp16 is measured after the one-box candidates, through rank 0.
    assert by_name["tp16"]["status"] == "measured" and by_name["tp16"]["host"] == f"{pair.a.name}+{pair.b.name}"
    assert by_name["tp16"]["nodes"] == [pair.a.name, pair.b.name]
    assert by_name["tp16"]["started"] >= max(by_name[name]["finished"] for name in ONE_BOX)
    assert json.loads(Path(by_name["tp16"]["record"]).read_text())["server_host"] == pair.a.name  # rank 0 serves
    measured = {name for name, entry in by_name.items() if entry["status"] == "measured"}
    assert measured == {*ONE_BOX, "tp16"}
    assert {by_name[name]["host"] for name in ONE_BOX} == {pair.a.name, pair.b.name}  # both hosts took candidates
    # Whichever host measured it, each one-box candidate's figure is the stand-in's clock.
    for name, key in ONE_BOX.items():
        assert by_name[name]["scores"]["c1"] == pytest.approx(true_decode_tok_s(key, 1), rel=0.05), name
    # Wall time falls with the hosts: the four one-box candidates ran as two rounds of two, against the sum of
    # their durations, what one host spends on them in a row. The search's own steps, paid either way, count
    # only on the fleet's side, so the ratio to a one-host search is lower than this one (0.68 measured).
    serial = sum(by_name[name]["duration_s"] for name in ONE_BOX)
    parallel = fleet["wall_s"] - by_name["tp16"]["duration_s"]
    print(f"fleet search wall time, tp16 aside: {parallel:.1f} s on two hosts; the candidates' durations add to {serial:.1f} s")
    assert parallel / serial < 0.85
    # The winner is left serving on every host.
    winner = fleet["winners"]["peak"]["name"]
    assert [pair.fact(box)["active_layout"] for box in pair.boxes] == [winner, winner]
