"""The unit's ExecStart and Environment lines: systemd must read back exactly the words we rendered."""

import shlex

from sglang_layout.schema import parse_layout
from sglang_layout.unit import systemd_assignment, systemd_word
from tests.unit import specs


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
    spec = specs.spec(layout)
    assert spec.name == "sglang-k26-ep8.service"
    # systemd's unquoting matches the shell's for what we emit (no % or $ here).
    assert shlex.split(spec.exec_start) == spec.argv
    assert spec.argv[-4:] == ["--json-model-override-args", '{"a": "b c"}', "--served-model-name", "kimi k2"]
    assert spec.to_dict()["environment_lines"][0] == "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"
