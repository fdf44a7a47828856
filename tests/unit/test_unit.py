"""The unit's ExecStart and Environment lines: systemd must read back exactly the words we rendered."""

import shlex

from sglang_layout.schema import parse_layout
from sglang_layout.unit import systemd_assignment, systemd_word, unit_spec


def test_plain_words_stay_plain_and_specials_are_escaped():
    assert systemd_word("--tp-size") == "--tp-size"
    assert systemd_word("50%") == "50%%"  # % starts a systemd specifier
    assert systemd_word("$HOME") == "$$HOME"  # $ expands variables in ExecStart
    assert systemd_word('{"rope_scaling": {"type": "yarn"}}') == '"{\\"rope_scaling\\": {\\"type\\": \\"yarn\\"}}"'
    assert systemd_word("a b") == '"a b"' and systemd_word("") == '""'
    assert systemd_assignment("A", "b c") == '"A=b c"' and systemd_assignment("A", "1") == "A=1"


def test_exec_start_reads_back_as_the_same_argv():
    args = {"json-model-override-args": '{"a": "b c"}', "served-model-name": "kimi k2"}
    layout = parse_layout("ep8", {"tp": 8, "ep": 8, "args": args})
    spec = unit_spec(
        layout,
        model_slug="k26",
        model_path="/srv/models/K",
        port=30001,
        host="0.0.0.0",
        venv="/opt/sglang/venv-0.5.23",
        python_version="3.12",
        cuda_home="/usr/local/cuda-13.0",
    )
    assert spec.name == "sglang-k26-ep8.service"
    # systemd's unquoting matches the shell's for what we emit (no % or $ here).
    assert shlex.split(spec.exec_start) == spec.argv
    assert spec.argv[-4:] == ["--json-model-override-args", '{"a": "b c"}', "--served-model-name", "kimi k2"]
    assert spec.to_dict()["environment_lines"][0] == "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"
