"""Property-based tests: no input at all makes the declaration, the estimator or the flag-table reader crash or hang.

Whatever hypothesis generates, each either returns a checked value or raises the one error
type the callers turn into a message (DeclarationError, ModelConfigError), within a second.
"""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_layout import memory, model_size, text
from sglang_layout.errors import DeclarationError
from sglang_layout.model_size import ModelConfigError
from sglang_layout.preflight import Facts, check_all
from sglang_layout.schema import parse_layouts, server_settings
from sglang_layout.sources import declaration_from_vars, flag_table_from_text
from tests.unit import specs

FUZZ = settings(max_examples=400, deadline=1000, suppress_health_check=[HealthCheck.too_slow])

# Text that likes the characters that break things: newlines, '%', '$', quotes, dashes, NUL, unicode separators.
NASTY = st.text(alphabet=st.sampled_from([*string.printable, "\x00", "\x1b", "\u2028", "\x85", "é", "%", "$", "-"]), max_size=40)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), NASTY)
JSONISH = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NASTY, inner, max_size=4), max_leaves=20
)
FLAG_NAMES = (
    st.sampled_from(
        [
            "hos",
            "tp",
            "mem-fraction-static",
            "moe-dp-size",
            "served-model-name",
            "context-length",
            "api-key",
            "ssl-keyfile",
            "x",
            "--tp-size",
            "nnodes",
        ]
    )
    | NASTY
)
LAYOUT = st.fixed_dictionaries(
    {},
    optional={
        "tp": SCALARS | st.integers(0, 2048),
        "ep": SCALARS | st.integers(0, 16),
        "pp": st.integers(-1, 16),
        "dp": st.integers(-1, 16),
        "description": NASTY | JSONISH,
        "nnodes": SCALARS | st.integers(0, 4),
        "nodes": NASTY | JSONISH,
        "args": st.dictionaries(FLAG_NAMES, JSONISH, max_size=5) | JSONISH,
        "env": st.dictionaries(NASTY | st.sampled_from(["NCCL_ALGO", "LD_PRELOAD"]), JSONISH, max_size=3),
        "hardening": st.dictionaries(
            st.sampled_from(["ProtectHome", "ExecStartPre", "ReadWritePaths"]) | NASTY, JSONISH, max_size=3
        ),
        "bogus": JSONISH,
    },
)
LAYOUTS = st.dictionaries(NASTY | st.sampled_from(["ep8", "tp8", "ep8-tuned"]), LAYOUT | JSONISH, max_size=4) | JSONISH


def assert_clean(value: object) -> None:
    """Every string that survived parsing is free of control characters."""
    if isinstance(value, str):
        assert not text.control_characters(value), value
    elif isinstance(value, dict):
        for key, item in value.items():
            assert_clean(key)
            assert_clean(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            assert_clean(item)


@FUZZ
@given(layouts=LAYOUTS, common_args=JSONISH | st.dictionaries(FLAG_NAMES, JSONISH, max_size=3), slug=NASTY, port=SCALARS)
def test_declaration_is_checked_or_refused_never_crashes(layouts, common_args, slug, port):
    try:
        parsed = parse_layouts(layouts, common_args=common_args)
        settings_ = server_settings(model_slug=slug or "k26", model_path="/srv/m", port=port, bind_address="127.0.0.1")
    except DeclarationError as error:
        assert error.fix
        return
    for layout in parsed.values():
        assert_clean([layout.name, layout.description, layout.args, layout.env, layout.hardening])
        assert layout.gpus_used <= 4096
    verdicts = check_all(parsed, Facts(gpu_count=8, gpu_memory_gib=95.0))
    assert len(verdicts) == len(parsed)
    for layout in parsed.values():
        spec = specs.spec(layout, model_slug=settings_.model_slug, port=settings_.port, host="127.0.0.1")
        unit = spec.to_dict()
        for line in [spec.exec_start, *unit["environment_lines"], *unit["hardening_lines"]]:
            assert "\n" not in line and "\r" not in line


@FUZZ
@given(
    variables=st.dictionaries(
        st.sampled_from(
            [
                "sglang_layouts",
                "sglang_gpu_count",
                "sglang_gpu_memory_gib",
                "sglang_port",
                "sglang_model_path",
                "sglang_bind_address",
                "sglang_common_env",
            ]
        ),
        JSONISH | LAYOUTS,
        max_size=7,
    )
)
def test_group_vars_are_checked_or_refused(variables):
    try:
        declaration_from_vars(variables)
    except DeclarationError as error:
        assert error.field_path


OTHER_KEYS = ["quantization_config", "architectures", "mlp_only_layers", "torch_dtype", "text_config", "tie_word_embeddings"]
KNOWN = [*model_size.INT_FIELDS, *OTHER_KEYS]
NUMBERS = st.integers(-5, 300) | st.integers(0, 2**40) | SCALARS


@FUZZ
@given(
    changes=st.dictionaries(st.sampled_from(KNOWN), NUMBERS | JSONISH, max_size=6),
    quant=st.dictionaries(
        st.sampled_from(["quant_method", "weight_block_size", "config_groups", "bits", "group_size", "ignore"]),
        JSONISH | st.sampled_from(["fp8", "awq", "gptq", "compressed-tensors"]),
        max_size=4,
    ),
    total=SCALARS | JSONISH,
)
def test_model_estimate_is_made_or_refused(kimi_config, changes, quant, total):
    config = {**kimi_config, **changes}
    if quant:
        config["quantization_config"] = quant
    try:
        weights = model_size.model_weights(config, {"metadata": {"total_size": total}})
    except ModelConfigError:
        return
    layouts = parse_layouts({"tp8": {"tp": 8}, "pp8": {"pp": 8}})
    for layout in layouts.values():
        memory.memory_fit(weights, layout, 95.0)


@FUZZ
@given(raw=NASTY | JSONISH.map(json.dumps) | st.builds(lambda o: json.dumps({"options": o}), JSONISH))
def test_flag_table_is_read_or_refused(raw):
    try:
        table = flag_table_from_text(raw)
    except DeclarationError:
        return
    assert table.options
