"""nvidia-smi's GPU query -> the record preflight reads."""

import time

import pytest

from sglang_layout.gpus import QUERY_FIELDS, describe, parse_gpu_query, power_range
from tests.conftest import REPO
from tests.unit.host_modules import host_helpers

FIELD_GPU = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97249, 580.95.05, 12.0, 5, 16, 150.00, 600.00"
FIELD_BOX = "\n".join(f"{i}, {FIELD_GPU}" for i in range(8))


def test_the_field_box_reads_as_eight_gpus_of_about_95_gib():
    record = parse_gpu_query(FIELD_BOX + "\n")
    assert (record["count"], record["memory_gib"], record["driver_version"]) == (8, 94.97, "580.95.05")
    assert record["name"] == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert [gpu["index"] for gpu in record["gpus"]] == list(range(8))


def test_mixed_gpus_are_only_as_roomy_as_the_smallest():
    record = parse_gpu_query(
        "0, NVIDIA H100 80GB HBM3, 81559, 580.65.06, 9.0, 5, 16, 200.00, 700.00\n"
        "1, NVIDIA A100-SXM4-40GB, 40960, 580.65.06, 8.0, 4, 16, 100.00, 400.00"
    )
    assert record["memory_mib"] == 40960 and record["memory_gib"] == 40.0
    assert record["name"] == "NVIDIA A100-SXM4-40GB / NVIDIA H100 80GB HBM3"
    assert (record["compute_capability"], record["pcie_gen"], record["pcie_width"]) == ("8.0", 4, 16)
    # A power limit is set on every GPU of a layout: only what all of them accept.
    assert power_range(record) == (200.0, 400.0)


def test_the_field_box_says_its_capability_and_link_and_an_unreported_link_is_said_unknown():
    record = parse_gpu_query(FIELD_BOX)
    assert (record["compute_capability"], record["pcie_gen"], record["pcie_width"]) == ("12.0", 5, 16)
    assert describe(record) == (
        "8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 94.97 GiB each, compute capability 12.0, PCIe Gen5 x16, "
        "driver 580.95.05"
    )
    # A GPU on an SXM board or behind a hypervisor may report no PCIe link: the record says None, not 0.
    sxm = parse_gpu_query("0, NVIDIA B200, 183359, 580.95.05, 10.0, [N/A], [N/A], [N/A], [N/A]")
    assert (sxm["compute_capability"], sxm["pcie_gen"], sxm["pcie_width"]) == ("10.0", None, None)
    assert "compute capability 10.0, PCIe link not recorded" in describe(sxm)
    assert (sxm["power_min_w"], sxm["power_max_w"], power_range(sxm)) == (None, None, None)
    assert power_range(record) == (150.0, 600.0)
    # A record written before the capability was asked for (four fields) reads as not recorded.
    older = {key: value for key, value in record.items() if key not in ("compute_capability", "pcie_gen", "pcie_width")}
    assert "compute capability not recorded, PCIe link not recorded" in describe(older)
    assert describe({}) == "no GPU record"
    assert power_range(older) == (150.0, 600.0) and power_range({"count": 8}) is None and power_range({}) is None


def test_the_role_asks_nvidia_smi_for_the_fields_the_parser_reads():
    task = (REPO / "roles" / "sglang_gpus" / "tasks" / "main.yml").read_text()
    assert f"- --query-gpu={','.join(QUERY_FIELDS)}\n      - --format=csv,noheader,nounits" in task


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "listed no GPUs"),
        ("0, NVIDIA H100, 81559, 580.65.06", "has 4 fields, expected 9"),
        ("0, NVIDIA H100, [N/A], 580.65.06, 9.0, 5, 16, 200, 700", "is not index, name, MiB, driver"),
        ("0, NVIDIA H100, 81559, 580.65.06, nine, 5, 16, 200, 700", "is not index, name, MiB, driver, compute capability"),
    ],
)
def test_answers_that_are_not_a_gpu_list_are_refused_with_the_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_gpu_query(text)


def test_compute_processes_are_matched_to_the_wanted_gpus_by_bus_id():
    holders = host_helpers()
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
    wait = host_helpers()
    started_us = int((time.monotonic() - 3.0) * 1e6)  # the unit started 3 s ago, before the wait began
    assert wait.seconds_since_start({"ExecMainStartTimestampMonotonic": str(started_us)}) == pytest.approx(3.0, abs=0.2)
    for unknown in ({}, {"ExecMainStartTimestampMonotonic": "0"}, {"ExecMainStartTimestampMonotonic": "n/a"}):
        assert wait.seconds_since_start(unknown) is None


ACTIVE = {"ActiveState": "active", "ExecMainStatus": "0"}
LOST_CGROUP_RACE = {"ActiveState": "failed", "Result": "exit-code", "ExecMainStatus": "219"}
CRASHED = {"ActiveState": "failed", "Result": "exit-code", "ExecMainStatus": "1"}


def scripted_wait(states: list[dict[str, str]], retry: bool) -> tuple[tuple, list[str]]:
    """The wait against a unit whose states come in the given order (the last repeats), always 200 on HTTP."""
    seen, starts = list(states), []

    def read_state() -> dict[str, str]:
        return seen.pop(0) if len(seen) > 1 else seen[0]

    start_again = (lambda: starts.append("start")) if retry else None
    return host_helpers().wait_healthy(read_state, lambda: 200, start_again, timeout=5, interval=0.01), starts


def test_a_start_systemd_lost_to_its_cgroup_race_is_made_once_more():
    (outcome, status, _state, restarts), starts = scripted_wait([LOST_CGROUP_RACE, ACTIVE], retry=True)
    assert (outcome, status, restarts, starts) == ("healthy", 200, 1, ["start"])
    (outcome, _status, state, restarts), starts = scripted_wait([LOST_CGROUP_RACE], retry=True)
    assert (outcome, state["ExecMainStatus"], restarts, starts) == ("exited", "219", 1, ["start"])  # once only


def test_a_server_that_crashed_or_a_wait_told_not_to_is_never_started_again():
    (outcome, _status, _state, restarts), starts = scripted_wait([CRASHED, ACTIVE], retry=True)
    assert (outcome, restarts, starts) == ("exited", 0, [])
    (outcome, _status, _state, restarts), starts = scripted_wait([LOST_CGROUP_RACE, ACTIVE], retry=False)
    assert (outcome, restarts, starts) == ("exited", 0, [])
