"""Records from several load-generator hosts are put on one clock, and read back as one level."""

from __future__ import annotations

import json

import pytest

from benchmarks import clocks
from benchmarks.levels import loadgen_usage, read_level
from benchmarks.metrics import window


def request(sent: float, first: float, end: float) -> dict:
    return {
        "type": "request",
        "level": 2,
        "phase": "measured",
        "sent": sent,
        "planned": None,
        "end": end,
        "ok": True,
        "error": "",
        "requested_tokens": 2,
        "output_tokens": 2,
        "input_tokens": 8,
        "chunk_times": [first, end],
        "chunk_tokens": [1, 1],
        "count_source": "usage",
    }


def host(offset: float, sent_wall: float, name: str) -> list[dict]:
    """One host's lines: a request sent at wall time `sent_wall`, written on a monotonic clock `offset` behind."""
    mono = sent_wall - offset
    return [
        request(mono, mono + 0.1, mono + 0.2),
        {"type": "metrics", "time": mono + 0.05, "sglang:gen_throughput": 10.0},
        {"type": "loadgen", "cpu_s": 0.1, "wall_s": 1.0, "requests": 1, "host": name},
        {"type": "clock", "wall": 1_000.0, "monotonic": 1_000.0 - offset},
    ]


def test_each_hosts_times_move_onto_the_first_hosts_clock_and_durations_stay():
    merged = clocks.on_one_clock([host(900.0, 1_700.0, "a"), host(12.5, 1_700.5, "b")])
    a, b = merged[0], merged[4]
    assert b["sent"] - a["sent"] == pytest.approx(0.5)  # half a second apart in wall time, whatever their clocks
    assert b["chunk_times"][0] - b["sent"] == pytest.approx(0.1) and b["end"] - b["sent"] == pytest.approx(0.2)
    assert merged[5]["time"] - b["sent"] == pytest.approx(0.05)
    assert merged[0] == host(900.0, 1_700.0, "a")[0]  # the first host's lines are untouched


def test_a_host_without_a_clock_pair_is_left_as_written():
    lines = host(5.0, 10.0, "a")[:3]
    assert clocks.on_one_clock([host(5.0, 10.0, "b"), lines])[4:] == lines


def test_a_level_from_several_hosts_reads_as_one_window(tmp_path):
    level = tmp_path / "level-2"
    level.mkdir()
    for name, offset, sent in (("a", 900.0, 1_700.0), ("b", 12.5, 1_701.0)):
        (level / f"{name}.jsonl").write_text("\n".join(json.dumps(line) for line in host(offset, sent, name)) + "\n")
    records, samples = read_level(level)
    start, end = window(records)
    assert end - start == pytest.approx(1.2)  # first sent to last end, across both hosts
    assert len(samples) == 2
    assert loadgen_usage(level) == {"processes": 2, "busiest_cpu_fraction": 0.1, "client_bound": False, "hosts": ["a", "b"]}
