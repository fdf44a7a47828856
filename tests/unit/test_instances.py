"""Several servers on one machine: instance names, GPU slices, unit names and what two entries fight over."""

import re

import pytest

from sglang_layout import instances
from sglang_layout.errors import DeclarationError
from sglang_layout.schema import parse_layout
from tests.unit import specs

TP4 = parse_layout("tp4", {"tp": 4})


def test_an_instance_names_its_units_and_record_and_only_its_units_match_its_pattern():
    assert instances.unit_name("k26", "tp4", "r0") == "sglang-k26-tp4.r0.service"
    assert instances.unit_name("k26", "tp4") == "sglang-k26-tp4.service"
    assert instances.fact_name("") == "sglang_service" and instances.fact_name("r-1") == "sglang_service_r_1"
    names = ["sglang-k26-tp4.service", "sglang-k26-tp4.r0.service", "sglang-k26-ep8.r1.service", "sglang-router-k26.service"]
    mine = {instance: [n for n in names if re.match(instances.unit_pattern(instance), n)] for instance in ("", "r0")}
    # The router's unit is told apart by its X-SGLang-Layout= marker, not by its name.
    assert mine == {"": ["sglang-k26-tp4.service", "sglang-router-k26.service"], "r0": ["sglang-k26-tp4.r0.service"]}


@pytest.mark.parametrize("bad", ["R0", "r0.x", "r0 --port", "-r0", "a" * 25, 7])
def test_a_bad_instance_name_is_refused_naming_the_field(bad):
    with pytest.raises(DeclarationError, match="sglang_instance"):
        instances.instance_name(bad)


def test_gpu_slices_accept_lists_and_ranges_and_refuse_what_the_machine_lacks():
    assert instances.gpu_slice("", 8) == list(range(8))
    assert instances.gpu_slice("4-7", 8) == [4, 5, 6, 7] == instances.gpu_slice("4,5, 6,7", 8)
    assert instances.gpu_slice([0, "1"], 8) == [0, 1]
    for bad, why in (([8], "GPU 8 is not on this machine"), ([1, 1], "twice"), ("0-x", "not a GPU index"), ([True], "not a GPU")):
        with pytest.raises(DeclarationError, match=f"sglang_gpu_ids.*{why}"):
            instances.gpu_slice(bad, 8)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("0-30000000", "GPU 30000000 is not on this machine"),
        ("0-99999999999999", "GPU 99999999999999 is not on this machine"),
        ("3-1", "the range '3-1' runs backwards"),
        (",".join(["0"] * 200), "characters long"),
    ],
)
def test_a_gpu_range_is_checked_before_it_is_expanded(bad, why):
    """A huge range once took minutes and gigabytes (and a MemoryError) before anything said no."""
    with pytest.raises(DeclarationError, match=f"sglang_gpu_ids.*{why}") as caught:
        instances.gpu_slice(bad, 8)
    assert len(str(caught.value)) < 400


def test_a_unit_runs_on_the_first_gpus_of_its_slice_and_a_small_slice_is_refused():
    unit = specs.spec(TP4, instance="r1", gpu_ids=[4, 5, 6, 7])
    assert unit.name == "sglang-k26-tp4.r1.service" and unit.environment["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert specs.spec(parse_layout("tp2", {"tp": 2}), gpu_ids=[6, 7, 0]).environment["CUDA_VISIBLE_DEVICES"] == "6,7"
    with pytest.raises(DeclarationError, match="tp4 needs 4 GPUs per node, the slice has 2"):
        specs.spec(TP4, instance="r1", gpu_ids=[6, 7])


def test_a_layout_cannot_choose_its_gpus_itself():
    with pytest.raises(DeclarationError, match=r"tp4\.env\.CUDA_VISIBLE_DEVICES.*sglang_gpu_ids"):
        parse_layout("tp4", {"tp": 4, "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}})


def test_entries_on_one_machine_must_keep_apart():
    box = {"ansible_host": "10.0.0.5"}
    good = {
        "r0": {**box, "sglang_instance": "r0", "sglang_gpu_ids": "0-3", "sglang_port": 30001},
        "r1": {**box, "sglang_instance": "r1", "sglang_gpu_ids": [4, 5, 6, 7], "sglang_port": 30002},
        "other": {"ansible_host": "10.0.0.6"},  # another machine: whatever it has is its own
    }
    assert instances.conflicts(good, list(good)) == []
    assert instances.first_on_machine(good, list(good), "r0") and not instances.first_on_machine(good, list(good), "r1")
    bad = {**good, "r1": {**good["r1"], "sglang_instance": "r0", "sglang_port": 30001, "sglang_gpu_ids": "3-6"}}
    problems = " | ".join(instances.conflicts(bad, list(bad)))
    assert "both instance r0" in problems and "both listen on port 30001" in problems and "share GPU 3 " in problems
    whole = {**good, "whole": dict(box)}  # a server without an instance owns the machine
    assert "whole has no sglang_instance" in " ".join(instances.conflicts(whole, list(whole)))
    # Same address, another SSH port (or sglang_machine): another machine.
    apart = {**good, "r1": {**good["r1"], "sglang_gpu_ids": "0-3", "ansible_port": 2222}}
    assert instances.conflicts(apart, list(apart)) == []
    # A bad slice is reported as a problem of that host, never as a traceback.
    broken = {**good, "r1": {**good["r1"], "sglang_gpu_ids": "4-x"}}
    (problem,) = instances.conflicts(broken, list(broken))
    assert problem.startswith("r1: sglang_gpu_ids = '4-x'") and "Fix:" in problem
