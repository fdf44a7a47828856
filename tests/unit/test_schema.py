import pytest

from sglang_layout.schema import DeclarationError, parse_layout, parse_layouts, select_layout


def test_defaults_are_one_and_common_args_merge_under_own():
    layout = parse_layout(
        "ep8-tuned",
        {"tp": 8, "ep": 8, "args": {"context-length": 4096, "max-running-requests": 256}},
        common_args={"mem-fraction-static": 0.88, "context-length": 32768},
        common_env={"NCCL_ALGO": "Ring"},
    )
    assert (layout.tp, layout.ep, layout.pp, layout.dp) == (8, 8, 1, 1)
    assert layout.args == {"mem-fraction-static": 0.88, "context-length": 4096, "max-running-requests": 256}
    assert list(layout.args)[:2] == ["mem-fraction-static", "context-length"]
    assert layout.env == {"NCCL_ALGO": "Ring"}
    assert layout.gpus_used == 8


def test_false_switch_is_off():
    layout = parse_layout("a", {"args": {"trust-remote-code": False}}, common_args={"trust-remote-code": True})
    assert layout.arg("trust-remote-code") is None


@pytest.mark.parametrize(
    ("name", "spec", "field_path", "words"),
    [
        ("EP8", {}, "sglang_layouts.EP8", "[a-z0-9-]+"),
        ("ep_8", {}, "sglang_layouts.ep_8", "[a-z0-9-]+"),
        ("ep8", {"tp": "8"}, "sglang_layouts.ep8.tp", "whole number"),
        ("ep8", {"tp": 8.0}, "sglang_layouts.ep8.tp", "whole number"),
        ("ep8", {"tp": True}, "sglang_layouts.ep8.tp", "whole number"),
        ("ep8", {"ep": 0}, "sglang_layouts.ep8.ep", "at least 1"),
        ("ep8", {"tensor_parallel": 8}, "sglang_layouts.ep8.tensor_parallel", "not a layout field"),
        ("ep8", {"args": {"--tp-size": 8}}, "sglang_layouts.ep8.args.--tp-size", "without leading dashes"),
        ("ep8", {"args": {"tp-size": 8}}, "sglang_layouts.ep8.args.tp-size", "rendered by the project"),
        ("ep8", {"args": {"ep": 8}}, "sglang_layouts.ep8.args.ep", "rendered by the project"),
        ("ep8", {"args": ["x"]}, "sglang_layouts.ep8.args", "mapping"),
        ("ep8", {"env": {"NCCL_IB_DISABLE": True}}, "sglang_layouts.ep8.env.NCCL_IB_DISABLE", "boolean"),
        ("ep8", {"env": {"1BAD": "x"}}, "sglang_layouts.ep8.env.1BAD", "environment variable name"),
        ("ep8", [8], "sglang_layouts.ep8", "mapping"),
    ],
)
def test_bad_declarations_name_field_value_and_fix(name, spec, field_path, words):
    with pytest.raises(DeclarationError) as caught:
        parse_layout(name, spec)
    assert caught.value.field_path == field_path
    assert words in str(caught.value)
    assert "Fix:" in str(caught.value) and caught.value.fix


def test_empty_layouts_and_unknown_selection():
    with pytest.raises(DeclarationError, match="non-empty mapping"):
        parse_layouts({})
    layouts = parse_layouts({"tp8": {"tp": 8}, "ep8": {"tp": 8, "ep": 8}})
    with pytest.raises(DeclarationError, match="use one of: tp8, ep8"):
        select_layout(layouts, "ep16")
    with pytest.raises(DeclarationError, match="no layout was given"):
        select_layout(layouts, None)
    assert select_layout(layouts, "ep8").ep == 8


def test_repository_declaration_holds_the_field_layouts(declaration):
    layouts = declaration.layouts
    assert list(layouts) == ["tp8", "pp8", "ep8", "ep4", "ep8-tuned", "tp4ep2", "tp2ep4"]
    assert (layouts["tp4ep2"].tp, layouts["tp4ep2"].ep) == (4, 2)
    assert (layouts["tp2ep4"].tp, layouts["tp2ep4"].ep) == (2, 4)
    assert (layouts["ep4"].tp, layouts["ep4"].ep) == (8, 4)
    assert layouts["pp8"].pp == 8
    tuned = layouts["ep8-tuned"].args
    assert tuned["max-running-requests"] == 256 and tuned["num-continuous-decode-steps"] == 8
