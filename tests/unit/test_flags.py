import contextlib
import io
import sys

import pytest

from sglang_layout import flags

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "standins" / "sglang"))
from sglang.cli_args import build_parser

FIELD_NOTES_EXCERPT = """\
usage: launch_server.py [-h] --model-path MODEL_PATH
                        [--ep-size EXPERT_PARALLEL_SIZE]

options:
  -h, --help            show this help message and exit
  --expert-parallel-size EXPERT_PARALLEL_SIZE, --ep-size EXPERT_PARALLEL_SIZE, --ep EXPERT_PARALLEL_SIZE
                        The expert parallelism size.
  --moe-a2a-backend {none,deepep,mooncake,nixl,mori,ascend_fuseep,flashinfer}
                        Choose the backend for MoE A2A.
  --trust-remote-code   Whether or not to allow custom models.
"""


def test_parses_the_field_notes_help_excerpt():
    table = flags.parse_help(FIELD_NOTES_EXCERPT, "0.5.x")
    ep = table.by_name["--ep"]
    assert ep.names == ("--expert-parallel-size", "--ep-size", "--ep") and ep.takes_value
    assert table.by_name["--moe-a2a-backend"].choices == (
        "none",
        "deepep",
        "mooncake",
        "nixl",
        "mori",
        "ascend_fuseep",
        "flashinfer",
    )
    assert not table.by_name["--trust-remote-code"].takes_value
    assert "--model-path" not in table.by_name  # usage lines are not options


def test_python_313_style_shows_the_metavar_once():
    table = flags.parse_help("options:\n  --expert-parallel-size, --ep-size, --ep EXPERT_PARALLEL_SIZE\n")
    assert table.by_name["--ep-size"].takes_value


@pytest.mark.parametrize("width", ["60", "200"])
def test_round_trip_through_real_argparse_help(flag_table, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", width)
    help_text = build_parser(flag_table.to_json()).format_help()
    parsed = flags.parse_help(help_text, flag_table.version)
    assert len(parsed.options) == len(flag_table.options) == 533
    original = {spec.names: spec for spec in flag_table.options}
    for spec in parsed.options:
        assert original[spec.names].takes_value == spec.takes_value, spec.names
        assert original[spec.names].choices == spec.choices, spec.names


def test_json_round_trip(flag_table):
    assert flags.table_from_json(flag_table.to_json()) == flag_table
    with pytest.raises(ValueError, match="not a flag table"):
        flags.table_from_json({"options": [{"name": "--x"}]})
    with pytest.raises(ValueError, match="no options found"):
        flags.parse_help("hello\n")


def rules_of(argv, table):
    return [(f.severity, f.message) for f in flags.check_argv(argv, table)]


def test_cuda_graph_max_bs_is_ambiguous_in_0_5_23(flag_table):
    [(severity, message)] = rules_of(["--cuda-graph-max-bs", "64"], flag_table)
    assert severity == "error"
    assert "ambiguous in SGLang 0.5.23" in message
    assert "--cuda-graph-max-bs-decode" in message and "--cuda-graph-max-bs-prefill" in message


def test_invalid_choice_names_the_valid_ones(flag_table):
    [finding] = flags.check_argv(["--moe-a2a-backend", "bogus"], flag_table)
    assert finding.severity == "error" and "invalid choice" in finding.message
    assert "deepep" in finding.fix and "none" in finding.fix


def test_unknown_flag_suggests_close_spellings(flag_table):
    [finding] = flags.check_argv(["--mem-fraction-statik", "0.88"], flag_table)
    assert "is not a flag of SGLang 0.5.23" in finding.message and "--mem-fraction-static" in finding.fix


def test_switch_with_value_value_missing_and_abbreviation(flag_table):
    assert rules_of(["--trust-remote-code", "yes"], flag_table)[0][0] == "error"
    assert "needs a value" in rules_of(["--context-length"], flag_table)[0][1]
    [(severity, message)] = rules_of(["--mem-fraction-stat", "0.8"], flag_table)
    assert severity == "warning" and "abbreviation of --mem-fraction-static" in message


def test_field_notes_unit_is_clean(flag_table, field_notes_argv):
    assert flags.check_argv(field_notes_argv, flag_table) == []


COMMAND_LINES = [
    "--tp-size 8 --ep-size 8",
    "--ep 4 --tp 8",
    "--cuda-graph-max-bs 64",
    "--cuda-graph-max-bs-decode 64",
    "--moe-a2a-backend bogus",
    "--moe-a2a-backend deepep",
    "--trust-remote-code",
    "--trust-remote-code yes",
    "--mem-fraction-stat 0.8",
    "--no-such-flag 1",
    "--grammar-backend none --attention-backend triton",
    "--attention-backend tritonx",
    "--context-length",
]


@pytest.mark.parametrize("line", COMMAND_LINES)
def test_verdict_agrees_with_argparse(flag_table, line):
    """Our verdict (any error) must equal argparse's (exit 2) on a parser built from the same table."""
    argv = ["--model-path", "/m", *line.split()]
    parser = build_parser(flag_table.to_json())
    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit) as _:
        accepted = False
        parser.parse_args(argv)
        accepted = True
    ours = not any(f.severity == "error" for f in flags.check_argv(argv, flag_table))
    assert ours == accepted
