import pytest

from sglang_layout import parallel
from sglang_layout.schema import parse_layout


def rules(findings, severity="error"):
    return sorted({f.rule for f in findings if f.severity == severity})


def lay(**spec):
    args = spec.pop("args", None)
    return parse_layout("x", {**spec, **({"args": args} if args else {})})


@pytest.mark.parametrize(
    ("spec", "gpus", "expected"),
    [
        ({"tp": 8}, 8, []),
        ({"pp": 8}, 8, []),
        ({"tp": 8, "ep": 8}, 8, []),
        ({"tp": 8, "ep": 4}, 8, []),
        ({"tp": 8, "ep": 2}, 8, []),
        ({"tp": 4, "ep": 2}, 8, []),
        ({"tp": 2, "ep": 4}, 8, ["ep-divides-tp", "moe-tp-width"]),
        ({"tp": 8, "ep": 3}, 8, ["ep-divides-tp"]),
        ({"tp": 8, "dp": 2}, 8, ["gpus"]),
        ({"tp": 4, "pp": 2, "dp": 2}, 16, []),
        ({"tp": 8, "ep": 2, "args": {"moe-dp-size": 8}}, 8, ["moe-tp-width"]),
        ({"tp": 8, "ep": 2, "args": {"moe-dp-size": 3}}, 8, ["moe-tp-width"]),
        ({"tp": 8, "ep": 2, "args": {"moe-dp-size": 2}}, 8, []),
        ({"tp": 8, "args": {"moe-dense-tp-size": 2}}, 8, ["moe-dense-tp"]),
        ({"tp": 8, "args": {"moe-dense-tp-size": 1}}, 8, []),
        ({"tp": 8, "args": {"moe-dense-tp-size": 8}}, 8, []),
        ({"tp": 8, "ep": 4, "args": {"moe-a2a-backend": "deepep"}}, 8, ["a2a-backend"]),
        ({"tp": 8, "ep": 4, "args": {"moe-a2a-backend": "mooncake"}}, 8, ["a2a-backend"]),
        ({"tp": 8, "ep": 8, "args": {"moe-a2a-backend": "deepep"}}, 8, []),
        ({"tp": 8, "ep": 4, "args": {"moe-a2a-backend": "none"}}, 8, []),
        ({"tp": 8, "ep": 4, "args": {"moe-runner-backend": "flashinfer_cutlass"}}, 8, ["moe-runner"]),
        ({"tp": 8, "ep": 2, "args": {"moe-runner-backend": "flashinfer_cutedsl"}}, 8, ["moe-runner"]),
        ({"tp": 8, "ep": 8, "args": {"moe-runner-backend": "flashinfer_cutlass"}}, 8, []),
        ({"tp": 8, "ep": 4, "args": {"moe-runner-backend": "triton"}}, 8, []),
        ({"tp": 8, "nnodes": 3, "nodes": "pair"}, 8, ["nnodes"]),
        ({"tp": 8, "nnodes": 2, "nodes": "pair"}, 4, []),
        ({"tp": 16, "nnodes": 2, "nodes": "pair"}, 8, []),
        ({"tp": 8, "pp": 2, "nnodes": 2, "nodes": "pair"}, 8, []),
        ({"tp": 16, "nnodes": 2, "nodes": "pair"}, 4, ["gpus"]),
    ],
)
def test_parallel_rules(spec, gpus, expected):
    assert rules(parallel.check_parallel(lay(**spec), gpus, None)) == expected


def test_tp2ep4_names_zero_division_and_the_fix():
    findings = parallel.check_parallel(lay(tp=2, ep=4), 8, 384)
    width = next(f for f in findings if f.rule == "moe-tp-width")
    assert "2 // 4 // 1 = 0" in width.message and "ZeroDivisionError" in width.message
    assert width.fix == "SGLang nests EP inside TP: on 8 GPUs write tp 8, ep 4"


def test_partial_gpu_use_is_info_with_the_full_width_fix():
    findings = parallel.check_parallel(lay(tp=4, ep=2), 8, 384)
    assert rules(findings) == []
    info = [f for f in findings if f.severity == "info"]
    assert info and "uses 4 of the host's 8 GPUs" in info[0].message and info[0].fix == "to use all 8, write tp 8, ep 2"


def test_routed_experts_must_split_evenly():
    assert rules(parallel.check_parallel(lay(tp=8, ep=8), 8, 384)) == []
    assert rules(parallel.check_parallel(lay(tp=6, ep=6), 8, 384)) == []
    assert rules(parallel.check_parallel(lay(tp=8, ep=8), 8, 60)) == ["experts-divisible"]


def test_moe_tp_width():
    assert parallel.moe_tp_width(lay(tp=8, ep=4)) == 2
    assert parallel.moe_tp_width(lay(tp=8, ep=2, args={"moe-dp-size": 2})) == 2
    assert parallel.moe_tp_width(lay(tp=2, ep=4)) == 0


def test_deprecated_dp_attention_warns():
    findings = parallel.check_parallel(lay(tp=8, args={"enable-dp-attention": True}), 8, None)
    assert rules(findings, "warning") == ["deprecated"]
    assert "attn-dp-size" in findings[-1].fix
