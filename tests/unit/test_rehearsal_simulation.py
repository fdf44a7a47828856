"""REHEARSAL_SIMULATION=FILE is checked against the stand-in's own schema before any box starts."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from sglang_layout.gpus import QUERY_FIELDS, parse_gpu_query, power_range
from tests.conftest import REPO
from tests.rehearsal.gpu_host import GPU_HOST, read_simulation, true_aggregate_tok_s, true_decode_tok_s


def test_the_default_simulation_is_valid_and_a_file_is_read_as_given(tmp_path):
    path = tmp_path / "sim.json"
    path.write_text(json.dumps({**GPU_HOST, "itl_ms": {"default": 10.0}}))
    assert read_simulation(path)["itl_ms"] == {"default": 10.0}


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not a readable JSON file"), ('{"itl": 5}', "itl; the fields are"), ("[1]", "not an object")],
)
def test_a_bad_simulation_file_is_named_with_the_fields_it_may_hold(tmp_path, content, message):
    path = tmp_path / "sim.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_simulation(path)


def test_the_truth_helper_follows_the_clock_and_the_roofline():
    assert true_decode_tok_s("tp8-ep8-pp1-dp1", 1) == pytest.approx(1000 / 15.4)
    assert true_decode_tok_s("tp8-ep8-pp1-dp1", 64) == pytest.approx(961 / 64)
    assert true_decode_tok_s("unknown", 1) == pytest.approx(1000 / 38.0)


def test_the_aggregate_truth_counts_the_prefill_before_each_first_token():
    # PP8 at C=64 with 32 tokens: 161.6 ms a token under the 396 tok/s roofline, the first after 20 ms.
    expected = 64 * 32 / (0.020 + 31 * 64 / 396)
    assert true_aggregate_tok_s("tp1-ep1-pp8-dp1", 64, 32) == pytest.approx(expected)
    assert expected > 396  # a little above the roofline: first tokens do not wait for it


@pytest.mark.parametrize(
    ("capability", "gpu"), [("9.0", "NVIDIA H200"), ("12.0", "NVIDIA RTX PRO 6000 Blackwell Server Edition")]
)
def test_a_simulation_sets_the_compute_capability_the_stand_in_nvidia_smi_reports(tmp_path, capability, gpu):
    """An H200 box (9.0) rehearses as well as the field notes' (12.0): the stand-in reads it from the simulation,
    which accepts the field, and the GPU record preflight reads says it."""
    path = tmp_path / "sim.json"
    path.write_text(json.dumps({**GPU_HOST, "gpu_name": gpu, "gpu_compute_cap": capability}))
    assert read_simulation(path)["gpu_compute_cap"] == capability
    query = ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits"]
    answer = subprocess.run(
        [str(REPO / "tests" / "standins" / "nvidia-smi" / "nvidia-smi"), *query],
        env={**os.environ, "SGLANG_STANDIN_CONFIG": str(path)},
        capture_output=True,
        text=True,
        check=True,
    )
    record = parse_gpu_query(answer.stdout)
    assert (record["count"], record["name"], record["compute_capability"]) == (8, gpu, capability)
    assert power_range(record) == (150.0, 600.0)
