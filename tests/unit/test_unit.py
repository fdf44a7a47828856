"""The unit's ExecStart and Environment lines: systemd must read back exactly the words we rendered."""

import shlex

import pytest

from sglang_layout.schema import parse_layout
from sglang_layout.unit import read_unit_file, systemd_assignment, systemd_word
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


def test_a_unit_file_says_its_layout_command_and_node_part():
    written = "# Command: python -m sglang.launch_server --tp 8 --nnodes 2 --node-rank 1\n[Unit]\nX-SGLang-Layout=tp16\n"
    # Written before X-SGLang-Node= existed: its part is read from its command.
    assert read_unit_file(written) == {
        "layout": "tp16",
        "command": "python -m sglang.launch_server --tp 8 --nnodes 2 --node-rank 1",
        "node_rank": 1,
        "nnodes": 2,
    }
    # The line wins over the command, whose flags may be quoted or absent.
    assert read_unit_file(written + "X-SGLang-Node=0/4\n")["node_rank"] == 0
    assert read_unit_file("[Unit]\nX-SGLang-Layout=ep8\nX-SGLang-Node=0/1\n") == {
        "layout": "ep8",
        "command": "",
        "node_rank": 0,
        "nnodes": 1,
    }
    with pytest.raises(ValueError, match="not rank/nodes: x/1"):
        read_unit_file("X-SGLang-Node=x/1\n")


def test_the_install_records_variables_are_the_hosts_not_the_layouts():
    from sglang_layout.errors import DeclarationError

    layout = parse_layout("ep8", {"tp": 8, "env": {"FLASHINFER_CUBIN_DIR": "/dev/shm/cubins"}})
    with pytest.raises(DeclarationError) as caught:
        specs.spec(layout, base_env={"FLASHINFER_CUBIN_DIR": "/opt/cubins"})
    assert caught.value.field_path == "sglang_layouts.ep8.env.FLASHINFER_CUBIN_DIR"
    assert "install record sets FLASHINFER_CUBIN_DIR" in caught.value.problem
    environment = specs.spec(layout).environment
    assert environment["FLASHINFER_CUBIN_DIR"] == "/dev/shm/cubins" and next(iter(environment)) == "CUDA_VISIBLE_DEVICES"
