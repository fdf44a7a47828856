"""Our flag-table parser and flag checks against the REAL sglang 0.5.23: its own --help, its own argparse."""

from __future__ import annotations

import json
import subprocess

import pytest

from sglang_layout import command, flags, secrets
from tests.unit.test_flags import COMMAND_LINES

# Parses each command line with SGLang's own parser (ServerArgs.add_cli_args), in one process (one import).
REAL_ARGPARSE = """
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs
verdicts = []
for argv in json.loads(sys.stdin.read()):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    error = io.StringIO()
    try:
        with contextlib.redirect_stderr(error):
            parser.parse_args(argv)
        verdicts.append([0, ""])
    except SystemExit as exc:
        verdicts.append([exc.code, error.getvalue().strip().splitlines()[-1:]])
print(json.dumps(verdicts))
"""


@pytest.fixture(scope="module")
def real_table(real_help):
    table = flags.parse_help(real_help, version="0.5.23")
    assert table.options, "no options parsed from the real --help"
    return table


def test_the_real_help_parses_to_the_recorded_table(real_table, flag_table):
    real = {spec.names: spec for spec in real_table.options}
    recorded = {spec.names: spec for spec in flag_table.options}
    assert real.keys() == recorded.keys()
    assert len(real) == 533

    # Same allowed values (the recorded table lists some choice lists in another order).
    def choices(table: dict) -> dict:
        return {names: None if spec.choices is None else sorted(spec.choices) for names, spec in table.items()}

    real_choices, recorded_choices = choices(real), choices(recorded)
    # Found by this tier: the real --help lists choices for the nargs='*' flag --lora-target-modules
    # ("[{q_proj,...,all} ...]"); the recorded reference file has none for it. Our parser reads the real one.
    assert "all" in real_choices.pop(("--lora-target-modules",)) and recorded_choices.pop(("--lora-target-modules",)) is None
    assert real_choices == recorded_choices
    assert {names: spec.takes_value for names, spec in real.items()} == {n: s.takes_value for n, s in recorded.items()}


def test_every_flag_and_choice_our_layouts_use_is_in_the_real_help(real_table, declaration):
    for name, layout in declaration.layouts.items():
        argv = command.server_args(
            layout, model_path=declaration.model_path, port=declaration.port, host=declaration.bind_address
        )
        assert flags.check_argv(argv, real_table) == [], name


def test_our_verdicts_equal_the_real_argparse(real_python, real_table):
    lines = [["--model-path", "/m", *line.split()] for line in COMMAND_LINES]
    done = subprocess.run(
        [str(real_python), "-c", REAL_ARGPARSE], input=json.dumps(lines), capture_output=True, text=True, timeout=600, check=True
    )
    real = json.loads(done.stdout)
    for argv, (code, message) in zip(lines, real, strict=True):
        ours = not any(f.severity == "error" for f in flags.check_argv(argv, real_table))
        assert ours == (code == 0), f"{' '.join(argv)}: real argparse exit {code} {message}"
    verdicts = dict(zip(COMMAND_LINES, real, strict=True))
    assert verdicts["--cuda-graph-max-bs 64"][0] == 2 and "ambiguous option" in verdicts["--cuda-graph-max-bs 64"][1][0]
    assert verdicts["--moe-a2a-backend bogus"][0] == 2 and "invalid choice" in verdicts["--moe-a2a-backend bogus"][1][0]


# Parses each rendered command line the way the real launcher does: --config merged in first, then argparse.
REAL_PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
try:
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
except ImportError:
    from sglang.srt.server_args_config_parser import ConfigArgumentMerger
parsed = []
for argv in json.loads(sys.stdin.read()):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    merged = ConfigArgumentMerger(parser).merge_config_with_args(argv)
    namespace = parser.parse_args(merged)
    parsed.append({key: getattr(namespace, key, None) for key in
                   ("tp_size", "ep_size", "pp_size", "dp_size", "host", "port", "model_path", "api_key", "admin_api_key")})
print(json.dumps(parsed))
"""


def test_the_real_argparse_reads_every_declared_layout_as_declared(real_python, declaration, tmp_path):
    key, admin = "sk-real-tier-0123456789abcdef", "admin-real-tier-0123456789"
    config = tmp_path / "sglang-secrets.yaml"
    config.write_text(secrets.config_yaml({"sglang_api_key": key, "sglang_admin_api_key": admin}))
    lines = [
        command.server_args(
            layout,
            model_path=declaration.model_path,
            port=declaration.port,
            host=declaration.bind_address,
            secrets_file=str(config),
        )
        for layout in declaration.layouts.values()
    ]
    assert all(key not in " ".join(argv) for argv in lines)
    done = subprocess.run(
        [str(real_python), "-c", REAL_PARSE], input=json.dumps(lines), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for layout, seen in zip(declaration.layouts.values(), json.loads(done.stdout), strict=True):
        assert seen == {
            "tp_size": layout.tp,
            "ep_size": layout.ep,
            "pp_size": layout.pp,
            "dp_size": layout.dp,
            "host": declaration.bind_address,
            "port": declaration.port,
            "model_path": declaration.model_path,
            "api_key": key,
            "admin_api_key": admin,
        }, layout.name
