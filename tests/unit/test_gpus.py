"""nvidia-smi's GPU query -> the record preflight reads."""

import pytest

from sglang_layout.gpus import parse_gpu_query

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
