"""`--layouts auto` (sglang_layout/shapes.py): every shape the GPUs allow under SGLang's nesting, named by rule."""

from __future__ import annotations

import pytest

from sglang_layout import shapes
from sglang_layout.errors import DeclarationError
from sglang_layout.schema import parse_layouts


def gpus(entry: dict) -> int:
    return entry.get("dp", 1) * entry["tp"] * entry.get("pp", 1)


def test_eight_gpus_give_every_nesting_each_using_all_eight():
    found = shapes.shapes(8, attention_dp=False)
    assert all(gpus(entry) == 8 for entry in found.values())
    assert all(entry["tp"] % entry.get("ep", 1) == 0 for entry in found.values())  # ep is carved out of tp
    # tp8 with ep 1, 2, 4, 8; tp4 beside pp2 or dp2 with ep 1, 2, 4; tp2 beside (pp, dp) = (1, 4), (2, 2), (4, 1)
    # with ep 1, 2; tp1 with pp 1, 2, 4, 8: 4 + 6 + 6 + 4.
    assert len(found) == 20
    assert {"tp8", "tp8-ep8", "tp8-ep4", "pp8", "tp4-pp2", "tp4-ep2-dp2", "tp2-pp2-dp2", "dp8", "pp2-dp4"} <= set(found)
    assert found["tp8-ep4"] == {"description": "a shape of --layouts auto", "tp": 8, "ep": 4}
    assert found["pp8"] == {"description": "a shape of --layouts auto", "tp": 1, "pp": 8}
    parse_layouts(found)  # every one a valid declaration entry under the schema's own rules


def test_attention_dp_shapes_only_where_the_model_takes_it_and_within_tp():
    plain, with_attention = shapes.shapes(8, attention_dp=False), shapes.shapes(8, attention_dp=True)
    extra = {name: entry for name, entry in with_attention.items() if name not in plain}
    assert extra["tp8-ep8-attn-dp8"]["args"] == {"attn-dp-size": 8}
    assert all(entry["tp"] % entry["args"]["attn-dp-size"] == 0 and gpus(entry) == 8 for entry in extra.values())
    assert len(extra) == 4 * 3  # tp8 with ep 1, 2, 4, 8 x attn-dp 2, 4, 8: with pp or dp beside it, none
    assert not any("pp" in entry or "dp" in entry for entry in extra.values())


def test_auto_joins_the_named_layouts_and_a_declared_twin_is_the_declared_one():
    declared = {"tp8": {"tp": 8, "args": {"max-running-requests": 64}}, "ep8": {"tp": 8, "ep": 8}}
    layouts, chosen = shapes.with_auto(declared, ["ep8", "auto"], 2, attention_dp=False)
    assert chosen == ["ep8", "tp2", "tp2-ep2", "dp2", "pp2"]
    assert layouts["tp8"] == declared["tp8"] and layouts["tp2-ep2"] == {
        "description": "a shape of --layouts auto",
        "tp": 2,
        "ep": 2,
    }
    same = shapes.with_auto({"tp2": {"tp": 2, "args": {"chunked-prefill-size": 4096}}}, ["auto"], 2, attention_dp=False)[0]
    assert same["tp2"]["args"] == {"chunked-prefill-size": 4096}  # the declared tp2 is the shape, with its own args
    with pytest.raises(DeclarationError, match=r"sglang_layouts\.tp2.*auto shape with other sizes"):
        shapes.with_auto({"tp2": {"tp": 1, "pp": 2}}, ["auto"], 2, attention_dp=False)
    assert shapes.with_auto(declared, ["ep8"], 8, attention_dp=False) == (declared, ["ep8"])


@pytest.mark.parametrize("count", [0, 65])
def test_a_gpu_count_outside_what_auto_covers_is_refused(count):
    with pytest.raises(DeclarationError, match="--layouts auto"):
        shapes.shapes(count, attention_dp=False)
