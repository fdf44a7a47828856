"""The bottleneck rules (benchmarks/bottleneck.py): each one from the figures that make it hold, their order,
and a level where none holds, with the figures that ruled each out."""

from __future__ import annotations

import pytest

from benchmarks import bottleneck

LINK = 63_016.0  # PCIe Gen5 x16, one direction


def gpus(sm: float, pcie: float) -> dict:
    def figure(value: float) -> dict:
        return {"mean": value, "p50": value, "p95": value}

    per_gpu = {"sm": figure(sm), "rxpci": figure(pcie / 2), "txpci": figure(pcie / 2)}
    return {"interval_s": 1, "samples": 5, "per_gpu": {"0": {**dict.fromkeys(("mem", "fb", "pwr"), figure(0.0)), **per_gpu}}}


def level(**figures: object) -> dict:
    server = {"num_running_reqs": 3.0, "num_queue_reqs": 0.0, "max_running_reqs": 4.0, "max_token_usage": 0.3, "retracted": 0.0}
    return {
        "server_metrics": {**server, **figures.pop("server", {})},
        "loadgen": figures.pop("loadgen", {"busiest_cpu_fraction": 0.2, "client_bound": False}),
        "gpus": figures.pop("gpus", gpus(40, 1000)),
    }


@pytest.mark.parametrize(
    ("figures", "name", "evidence"),
    [
        ({"loadgen": {"busiest_cpu_fraction": 0.85, "client_bound": True}}, "load generator", "used 85% of a core (over 70%)"),
        ({"server": {"max_token_usage": 0.99, "retracted": 12.0}}, "KV cache full", "at 0.99 and 12 requests were retracted"),
        ({"server": {"num_running_reqs": 32.0, "num_queue_reqs": 14.2}}, "scheduler cap", "max-running-requests 32, 14.2 queued"),
        ({"gpus": gpus(50, 0.8 * 2 * LINK)}, "PCIe", "80% of its link both ways (126,032 MB/s)"),
        ({"gpus": gpus(95, 1000)}, "GPU compute", "SM busy 95% (median) on GPU 0"),
        ({}, "not identified", "3.0 running, 0.0 queued, token usage at most 0.30, SM busy at most 40%, PCIe at most 1%"),
    ],
)
def test_each_rule_names_its_bottleneck_with_evidence(figures, name, evidence):
    found = bottleneck.bottleneck(level(**figures), link_mb_s=LINK, running_cap=32)
    assert found["name"] == name and evidence in found["evidence"], found


def test_the_first_rule_that_holds_wins_and_what_is_missing_rules_nothing_in():
    everything = level(
        loadgen={"busiest_cpu_fraction": 0.9, "client_bound": True},
        server={"max_token_usage": 1.0, "retracted": 3.0, "num_running_reqs": 32.0, "num_queue_reqs": 5.0},
        gpus=gpus(99, 2 * LINK),
    )
    assert bottleneck.bottleneck(everything, link_mb_s=LINK, running_cap=32)["name"] == "load generator"
    # A full cache without a retraction is not called full; without a known cap, the most that ran is the cap.
    almost = level(server={"max_token_usage": 0.99, "retracted": 0.0, "num_running_reqs": 3.9, "num_queue_reqs": 2.0})
    found = bottleneck.bottleneck(almost)
    assert found["name"] == "scheduler cap" and "at the most that ran, 4" in found["evidence"]
    # No link known: PCIe is never named; no GPU telemetry: said so.
    assert bottleneck.bottleneck(level(gpus=gpus(10, 10 * LINK)))["name"] == "not identified"
    bare = bottleneck.bottleneck({"server_metrics": {"samples": 0}, "loadgen": None})
    assert bare["name"] == "not identified" and bare["evidence"].startswith("nothing to judge by: no /metrics samples")
    partial = bottleneck.bottleneck({"server_metrics": {"num_running_reqs": 2.0}, "gpus": None})
    assert partial["evidence"] == "no rule held: 2.0 running, - queued, no GPU telemetry"


def test_the_cap_comes_from_server_info_or_the_command_line_and_attach_skips_failed_levels():
    assert bottleneck.running_cap({"server_args": {"max_running_requests": 48}}) == 48
    assert bottleneck.running_cap({"command": "python -m sglang.launch_server --max-running-requests 16 --tp 8"}) == 16
    assert bottleneck.running_cap({"server_args": {"max_running_requests": None}, "command": "x --tp 8"}) is None
    assert bottleneck.running_cap({"command": "x --max-running-requests nope"}) is None
    levels = [{**level(), "status": "ok"}, {"status": "failed"}]
    bottleneck.attach(levels, {"gpus": {"pcie_gen": 5, "pcie_width": 16}})
    assert levels[0]["bottleneck"]["name"] == "not identified" and "bottleneck" not in levels[1]
    assert bottleneck.line(levels[0]).startswith("not identified: no rule held") and bottleneck.line(levels[1]) == ""


def test_a_rule_added_to_the_table_is_tried_in_its_place_without_other_edits(monkeypatch):
    """docs/extending.md: a bottleneck rule is a row of bottleneck.RULES."""

    def swap_space(seen: bottleneck.Seen):
        if (seen.server.get("swapped_out") or 0) > 0:
            return {"name": "host swap", "evidence": f"{seen.server['swapped_out']:.0f} requests swapped out"}
        return None

    monkeypatch.setattr(bottleneck, "RULES", [swap_space, *bottleneck.RULES])
    figures = {"server_metrics": {"swapped_out": 3.0, "num_running_reqs": 2.0, "num_queue_reqs": 0.0}}
    assert bottleneck.bottleneck(figures) == {"name": "host swap", "evidence": "3 requests swapped out"}
    figures["server_metrics"]["swapped_out"] = 0.0
    assert bottleneck.bottleneck(figures)["name"] == "not identified"  # it does not hold: the others are tried
