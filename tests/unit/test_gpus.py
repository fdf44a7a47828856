"""nvidia-smi's GPU query -> the record preflight reads."""

import importlib.util
import time

import pytest

from sglang_layout.gpus import parse_gpu_query
from tests.conftest import REPO

FIELD_BOX = "\n".join(f"{i}, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97249, 580.95.05" for i in range(8))


def test_the_field_box_reads_as_eight_gpus_of_about_95_gib():
    record = parse_gpu_query(FIELD_BOX + "\n")
    assert (record["count"], record["memory_gib"], record["driver_version"]) == (8, 94.97, "580.95.05")
    assert record["name"] == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert [gpu["index"] for gpu in record["gpus"]] == list(range(8))


def test_mixed_gpus_are_only_as_roomy_as_the_smallest():
    record = parse_gpu_query("0, NVIDIA H100 80GB HBM3, 81559, 580.65.06\n1, NVIDIA A100-SXM4-40GB, 40960, 580.65.06")
    assert record["memory_mib"] == 40960 and record["memory_gib"] == 40.0
    assert record["name"] == "NVIDIA A100-SXM4-40GB / NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "listed no GPUs"),
        ("0, NVIDIA H100, 81559", "has 3 fields, expected 4"),
        ("0, NVIDIA H100, [N/A], 580.65.06", "is not index, name, MiB, driver"),
    ],
)
def test_answers_that_are_not_a_gpu_list_are_refused_with_the_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_gpu_query(text)


def _holders_module():
    spec = importlib.util.spec_from_file_location("sglang_gpu_holders", REPO / "plugins" / "modules" / "sglang_gpu_holders.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compute_processes_are_matched_to_the_wanted_gpus_by_bus_id():
    holders = _holders_module()
    bus_ids = holders.parse_bus_ids("0, 00000000:01:00.0\n1, 00000000:41:00.0\n2, 00000000:81:00.0\n")
    assert bus_ids == {"00000000:01:00.0": 0, "00000000:41:00.0": 1, "00000000:81:00.0": 2}
    apps = "00000000:41:00.0, 4242, python3, 85000\n00000000:81:00.0, 4242, python3, 85000\n00000000:01:00.0, 7, x, [N/A]\n"
    found = holders.parse_holders(apps, bus_ids, {1, 2})
    assert found == [
        {"gpu": 1, "pid": 4242, "name": "python3", "used_mib": 85000},
        {"gpu": 2, "pid": 4242, "name": "python3", "used_mib": 85000},
    ]
    assert holders.parse_holders(apps, bus_ids, {0}) == [{"gpu": 0, "pid": 7, "name": "x", "used_mib": 0}]
    assert holders.parse_holders("No running processes found\n", bus_ids, {0, 1, 2}) == []
    assert holders.describe(found) == "pid 4242 (python3) on GPU 1,2 holding 170000 MiB"


def test_the_load_time_counts_from_the_units_start_not_from_the_wait():
    spec = importlib.util.spec_from_file_location("sglang_wait_healthy", REPO / "plugins" / "modules" / "sglang_wait_healthy.py")
    wait = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wait)
    started_us = int((time.monotonic() - 3.0) * 1e6)  # the unit started 3 s ago, before the wait began
    assert wait.seconds_since_start({"ExecMainStartTimestampMonotonic": str(started_us)}) == pytest.approx(3.0, abs=0.2)
    for unknown in ({}, {"ExecMainStartTimestampMonotonic": "0"}, {"ExecMainStartTimestampMonotonic": "n/a"}):
        assert wait.seconds_since_start(unknown) is None
