import json
import subprocess
import sys

import pytest

from sglang_layout import command
from sglang_layout.cli import main
from sglang_layout.preflight import Facts, check_all, check_layout
from sglang_layout.report import format_report
from sglang_layout.schema import parse_layout
from tests.conftest import FIELD_NOTES_MODEL_PATH, flag_pairs


@pytest.fixture
def facts(kimi_config, flag_table, declaration):
    return Facts(
        gpu_count=8,
        gpu_memory_gib=94.97,
        model_config=kimi_config,
        flag_table=flag_table,
        model_path=declaration.model_path,
        port=declaration.port,
        host=declaration.bind_address,
    )


def test_field_layouts_pass_and_the_two_failures_fail_for_their_reasons(declaration, facts):
    verdicts = {v.layout.name: v for v in check_all(declaration.layouts, facts)}
    for name in ("tp8", "pp8", "ep8", "ep4", "ep8-tuned"):
        assert verdicts[name].ok, verdicts[name].summary()
    assert {f.rule for f in verdicts["tp4ep2"].errors} == {"memory"}
    assert "ep-divides-tp" in {f.rule for f in verdicts["tp2ep4"].errors}
    assert "moe-tp-width" in {f.rule for f in verdicts["tp2ep4"].errors}
    assert verdicts["tp2ep4"].moe_tp_width == 0 and verdicts["ep4"].moe_tp_width == 2


def test_intended_flag_that_drifted_is_caught(facts):
    layout = parse_layout("ep8-deepep", {"tp": 8, "ep": 8, "args": {"moe-a2a-backend": "deeep"}})
    verdict = check_layout(layout, facts)
    assert not verdict.ok and "invalid choice" in verdict.summary()


def test_rendered_ep8_tuned_matches_the_field_notes_unit(declaration, field_notes_argv):
    argv = command.server_args(
        declaration.layouts["ep8-tuned"], model_path=declaration.model_path, port=declaration.port, host=declaration.bind_address
    )
    expected, rendered = flag_pairs(field_notes_argv), flag_pairs(argv)
    assert expected.pop("--model-path") == FIELD_NOTES_MODEL_PATH and rendered.pop("--model-path") == declaration.model_path
    assert rendered == expected


def test_environment_and_visible_devices(declaration):
    layout = declaration.layouts["ep8-tuned"]
    env = command.service_environment(layout, venv="/opt/v", cuda_home="/usr/local/cuda-13.0", python_version="3.12")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["LD_LIBRARY_PATH"] == (
        "/opt/v/lib/python3.12/site-packages/nvidia/cu13/lib:"
        "/opt/v/lib/python3.12/site-packages/nvidia/cuda_runtime/lib:/usr/local/cuda-13.0/lib64"
    )
    assert env["PATH"].startswith("/usr/local/cuda-13.0/bin:/opt/v/bin:")
    assert env["NCCL_P2P_LEVEL"] == "5" and env["OMP_NUM_THREADS"] == "8"
    assert command.cuda_visible_devices(declaration.layouts["tp4ep2"]) == "0,1,2,3"


def test_skipped_checks_are_said(declaration):
    verdicts = check_all(declaration.layouts, Facts(gpu_count=8))
    text = format_report(verdicts)
    assert "not checked: memory fit" in text and "not checked: flags" in text
    assert all(v.fit is None for v in verdicts)


CLI = [
    "preflight",
    "--model-config",
    "examples/models/kimi-k2.6/config.json",
    "--flag-table",
    "tests/data/sglang-0.5.23-flags.json",
]


def test_cli_exit_codes(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert main([*CLI, "--layout", "ep8"]) == 0
    out = capsys.readouterr().out
    assert "tp2ep4" in out and "REJECTED" in out
    assert main([*CLI, "--layout", "tp4ep2"]) == 1
    assert "uses 4 GPUs; weights ~" in capsys.readouterr().err
    assert main([*CLI, "--layout", "ep16"]) == 2
    assert "is not declared in sglang_layouts" in capsys.readouterr().err
    assert main([*CLI, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["layout"] for d in data if not d["ok"]] == ["tp4ep2", "tp2ep4"]


def test_cli_missing_model_config_is_a_clear_error(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert main(["preflight", "--model-config", "nope/config.json"]) == 2
    assert "model_config_path = 'nope/config.json': file not found" in capsys.readouterr().err


def test_flag_table_command_parses_help_from_stdin(repo, tmp_path):
    help_text = "options:\n  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE\n  --trust-remote-code  x\n"
    done = subprocess.run(
        [sys.executable, "-m", "sglang_layout", "flag-table", "--version", "9.9"],
        input=help_text,
        capture_output=True,
        text=True,
        cwd=repo,
        check=True,
    )
    table = json.loads(done.stdout)
    assert table["sglang_version"] == "9.9" and table["options"][0]["names"] == ["--tp-size", "--tensor-parallel-size"]


def test_an_unpriced_model_is_said_once_per_layout_and_memory_is_skipped(declaration, flag_table):
    config = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "intermediate_size": 128,
        "quantization_config": {"quant_method": "mxfp4"},
    }
    verdicts = check_all(declaration.layouts, Facts(gpu_count=8, gpu_memory_gib=95, model_config=config, flag_table=flag_table))
    for verdict in verdicts:
        notes = [f for f in verdict.findings if "memory fit not checked" in f.message]
        assert len(notes) == 1 and verdict.fit is None
