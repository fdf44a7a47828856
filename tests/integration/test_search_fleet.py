"""The search over two identical rehearsal boxes: candidates in parallel, one per host, after checking the hosts alike.

The two provisioned GPU boxes of tests/rehearsal/gpu_pair.py, each simulating the field notes' box; the
same search on one of them is the yardstick for the figures and for the wall time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rehearsal.bench import benchmarks
from tests.rehearsal.gpu_pair import Pair, changed_json, model_config

ONE_BOX = ("tp8", "pp8", "ep8", "ep4")
CANDIDATES = ",".join([*ONE_BOX, "tp16"])
WORKLOAD = ("--levels", "1,16", "--output-tokens", "16", "--rounds", "2", "--min-requests", "4", "--metrics-interval", "0")


def search(pair: Pair, results: Path, hosts: str, *options: str):
    done = benchmarks(
        "search",
        *("--server-hosts", hosts, "--inventory", str(pair.inventory), "--results-dir", str(results)),
        *("--layouts", CANDIDATES, *WORKLOAD),
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
    one = search(pair, tmp_path / "one", pair.a.name)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-2000:]
    two = search(pair, tmp_path / "two", f"{pair.a.name},{pair.b.name}")
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-2000:]
    alone, fleet = manifest(tmp_path / "one"), manifest(tmp_path / "two")

    # tp16 spans both boxes: refused on one of them, measured on both (after the one-box candidates).
    (lone,) = [entry for entry in alone["candidates"] if entry["name"] == "tp16"]
    assert lone["status"] == "refused" and f"Fix: --server-hosts {pair.a.name},{pair.b.name}" in lone["reasons"][0]
    by_name = {entry["name"]: entry for entry in fleet["candidates"]}
    assert by_name["tp16"]["status"] == "measured" and by_name["tp16"]["host"] == f"{pair.a.name}+{pair.b.name}"
    assert by_name["tp16"]["nodes"] == [pair.a.name, pair.b.name]
    assert by_name["tp16"]["started"] >= max(by_name[name]["finished"] for name in ONE_BOX)
    assert json.loads(Path(by_name["tp16"]["record"]).read_text())["server_host"] == pair.a.name  # rank 0 serves
    measured = {name for name, entry in by_name.items() if entry["status"] == "measured"}
    assert measured == {*ONE_BOX, "tp16"}
    assert {by_name[name]["host"] for name in ONE_BOX} == {pair.a.name, pair.b.name}  # both hosts took candidates
    # Among the one-box candidates, each one's figures as on one host.
    for entry in alone["candidates"]:
        if entry["status"] == "measured":
            assert by_name[entry["name"]]["scores"]["c1"] == pytest.approx(entry["scores"]["c1"], rel=0.05)
    # Wall time falls with the hosts (the four one-box candidates: two rounds of two instead of four in a row).
    ratio = (fleet["wall_s"] - by_name["tp16"]["duration_s"]) / alone["wall_s"]
    print(f"fleet search wall time, tp16 aside: {ratio * alone['wall_s']:.1f} s on two hosts, {alone['wall_s']} s on one")
    assert ratio < 0.8
    # The winner is left serving on every host.
    winner = fleet["winners"]["peak"]["name"]
    assert [pair.fact(box)["active_layout"] for box in pair.boxes] == [winner, winner]
