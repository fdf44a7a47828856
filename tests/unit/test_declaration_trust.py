"""The declaration is data, never code: what reaches a unit, a path or a command line is exactly what was meant.

Each case here is one a review found passing before (injected unit lines, smuggled flags, raw
tracebacks); each must now be refused with the field, the value and the fix.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sglang_layout import command, flags, hardening, reserved
from sglang_layout.errors import DeclarationError
from sglang_layout.preflight import Facts, check_layout
from sglang_layout.schema import parse_layout, parse_layouts, server_settings
from sglang_layout.sources import declaration_from_vars, load_yaml_vars
from tests.unit import specs

INJECTION = "EP8\n[Service]\nExecStartPre=+/bin/touch /tmp/x"


def refused(call, *args, **kwargs) -> DeclarationError:
    with pytest.raises(DeclarationError) as caught:
        call(*args, **kwargs)
    error = caught.value
    assert error.field_path and error.fix, str(error)
    return error


# --- 1. the unit file carries exactly the declared command ---------------------------------------


def test_a_multi_line_description_is_folded_to_one_line_and_said_so():
    layout = parse_layout("ep8", {"tp": 8, "ep": 8, "description": INJECTION})
    assert "\n" not in layout.description and layout.description.startswith("EP8 [Service] ExecStartPre")
    assert layout.notices and "folded to one line" in layout.notices[0]
    verdict = check_layout(layout, Facts(gpu_count=8))
    assert any(f.rule == "declaration" and f.severity == "warning" for f in verdict.findings)
    ordinary = parse_layout("ep8", {"description": "EP8 tuned\nfor a deeper batch\n"})
    assert ordinary.description == "EP8 tuned for a deeper batch"


def test_control_characters_in_a_description_are_refused():
    error = refused(parse_layout, "ep8", {"description": "EP8\x1b[2J\x00"})
    assert error.field_path == "sglang_layouts.ep8.description" and "control characters" in error.problem


@pytest.mark.parametrize("name", ["ep8\n", "ep8\n[Service]", "-ep8", "ep 8", "", "x" * 49, "ep8\u2028"])
def test_layout_names_match_whole(name):
    refused(parse_layouts, {name: {"tp": 8}})


@pytest.mark.parametrize("name", ["FOO\n", "FOO\nBAR", "A B", "LD_PRELOAD", "PYTHONSTARTUP"])
def test_env_names_match_whole_and_never_load_code(name):
    error = refused(parse_layout, "ep8", {"env": {name: "1"}})
    assert error.field_path.startswith("sglang_layouts.ep8.env.")


CODE_LOADING = {
    "PYTHONPATH": "Python load or redirect code",
    "PYTHONHOME": "Python load or redirect code",
    "PYTHONWARNINGS": "Python load or redirect code",
    "PYTHONPYCACHEPREFIX": "Python load or redirect code",
    "LD_LIBRARY_PATH": "the unit sets it",
    "LD_BIND_NOW": "dynamic loader",
    "GCONV_PATH": "dynamic loader",
    "PATH": "the unit sets it",
    "CUDA_HOME": "the unit sets it",
    "CUDA_VISIBLE_DEVICES": "picks the GPUs",
    "NCCL_NET_PLUGIN": "plugin or injection",
    "NCCL_TUNER_PLUGIN": "plugin or injection",
    "CUDA_INJECTION64_PATH": "search path or the path",
    "TRITON_PTXAS_PATH": "search path or the path",
    "BASH_ENV": "shell run code",
    "BASH_FUNC_x": "shell run code",
}


@pytest.mark.parametrize(("name", "said"), CODE_LOADING.items())
def test_code_loading_and_unit_variables_are_refused_by_rule_with_the_field_and_the_fix(name, said):
    error = refused(parse_layout, "ep8", {"env": {name: "/dev/shm/pp"}})
    assert error.field_path == f"sglang_layouts.ep8.env.{name}" and said in error.problem, error.problem
    assert error.fix


@pytest.mark.parametrize("name", ["NCCL_ALGO", "NCCL_P2P_LEVEL", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "NCCL_TOPO_FILE"])
def test_tuning_variables_pass_the_env_rule(name):
    assert parse_layout("ep8", {"env": {name: "1"}}).env == {name: "1"}


def test_common_env_is_held_to_the_same_rule():
    with pytest.raises(DeclarationError) as caught:
        parse_layout("ep8", {"tp": 8}, common_env={"PYTHONPATH": "/dev/shm/pp"})
    assert caught.value.field_path == "sglang_common_env.PYTHONPATH"


@pytest.mark.parametrize(
    ("spec", "field_path"),
    [
        ({"args": {"served-model-name": "kimi\nExecStartPre=+/bin/sh"}}, "sglang_layouts.ep8.args.served-model-name"),
        ({"env": {"NCCL_ALGO": "Ring\n[Service]\nUser=root"}}, "sglang_layouts.ep8.env.NCCL_ALGO"),
        ({"args": {"served-model-name": ["kimi", "a\rb"]}}, "sglang_layouts.ep8.args.served-model-name[1]"),
        ({"args": {"mem-fraction-static": "abc"}}, "sglang_layouts.ep8.args.mem-fraction-static"),
        ({"args": {"mem-fraction-static": 1.5}}, "sglang_layouts.ep8.args.mem-fraction-static"),
        ({"args": {"moe-dp-size": 0}}, "sglang_layouts.ep8.args.moe-dp-size"),
        ({"args": {"context-length": float("nan")}}, "sglang_layouts.ep8.args.context-length"),
        ({"tp": 10_000_000}, "sglang_layouts.ep8.tp"),
        ({"tp": 1024, "pp": 1024}, "sglang_layouts.ep8"),
        ({"hardening": {"ExecStartPre": "+/bin/sh"}}, "sglang_layouts.ep8.hardening.ExecStartPre"),
        ({"hardening": {"ReadWritePaths": "/var/lib/x \\"}}, "sglang_layouts.ep8.hardening.ReadWritePaths"),
        ({"hardening": {"ReadWritePaths": ["/a", "/b\\"]}}, "sglang_layouts.ep8.hardening.ReadWritePaths[1]"),
        ({"hardening": {"ProtectSystem": "strict\nExecStartPre=+/bin/sh"}}, "sglang_layouts.ep8.hardening.ProtectSystem"),
    ],
)
def test_values_that_would_break_the_unit_or_the_rules_are_refused(spec, field_path):
    assert refused(parse_layout, "ep8", spec).field_path == field_path


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model_slug", "x/../../escaped"),
        ("model_slug", "k26%n"),
        ("model_slug", "k 26"),
        ("model_slug", "K26"),
        ("model_path", "/srv/models/K\n[Service]"),
        ("model_path", "/srv/../root/models"),
        ("model_path", "models/K"),
        ("model_path", "/srv/my models/K"),
        ("port", 99999),
        ("port", "abc"),
        ("port", True),
        ("bind_address", "0.0.0.0 --tp-size 2"),
    ],
)
def test_server_settings_are_checked(field, value):
    error = refused(server_settings, **{field: value})
    assert error.field_path == f"sglang_{field}"


def test_the_unit_renders_only_checked_paths():
    layout = parse_layout("ep8", {"tp": 8})
    with pytest.raises(DeclarationError, match="venv"):
        specs.spec(layout, venv="/opt/x\ny")
    with pytest.raises(DeclarationError, match="install environment"):
        specs.spec(layout, base_env={"A": "1\n2"})


# --- 2. reserved flags cannot be smuggled in -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "meaning"),
    [
        ("hos", "host"),
        ("por", "port"),
        ("tp", "tp-size"),
        ("model", "model-path"),
        ("expert-parallel", "ep-size"),
        ("api-key", "api-key"),
        ("conf", "config"),
    ],
)
def test_abbreviations_of_reserved_flags_are_refused_with_the_table(flag_table, name, meaning):
    assert reserved.reserved_meaning(name, flag_table) == meaning
    error = refused(parse_layout, "ep8", {"args": {name: "x"}}, flag_table=flag_table)
    assert f"--{meaning}" in error.problem


def test_a_reserved_flag_no_field_sets_says_so_instead_of_naming_a_field(flag_table):
    error = refused(parse_layout, "ep8", {"args": {"conf": "/x"}}, flag_table=flag_table)
    assert "the project passes --config itself" in error.fix and "`the`" not in error.fix


def test_one_flag_given_twice_through_an_abbreviation_is_refused(flag_table):
    """argparse would read both as --max-running-requests and keep the last value, silently."""
    twice = {"args": {"max-running-requests": 64, "max-running-request": 128}}
    error = refused(parse_layout, "ep8", twice, flag_table=flag_table)
    assert (
        error.field_path == "sglang_layouts.ep8.args.max-running-request" and "one flag, --max-running-requests" in error.problem
    )
    argv = ["--max-running-requests", "64", "--max-running-request", "128"]
    [duplicate] = [f for f in flags.check_argv(argv, flag_table) if f.severity == "error"]
    assert "are one flag, --max-running-requests" in duplicate.message


@pytest.mark.parametrize("name", ["hos", "por", "tp", "ho", "api"])
def test_without_a_table_any_prefix_of_a_reserved_flag_is_refused(name):
    refused(parse_layout, "ep8", {"args": {name: "x"}})


def test_real_flags_that_only_look_like_reserved_prefixes_pass(flag_table):
    assert reserved.reserved_meaning("ssl-keyfile", flag_table) is None
    assert reserved.reserved_meaning("ssl-keyfile") is None
    assert reserved.reserved_meaning("tp-size-x", flag_table) is None  # not a flag at all: the flag check refuses it
    assert reserved.reserved_meaning("mod", flag_table) is None  # ambiguous: argparse refuses to start, the flag check says so
    layout = parse_layout("ep8", {"args": {"ssl-keyfile": "/etc/ssl/k.pem", "port-x": 1}}, flag_table=None)
    assert "ssl-keyfile" in layout.args


def test_values_cannot_carry_flags():
    error = refused(parse_layout, "ep8", {"args": {"served-model-name": ["kimi", "--tp-size", "2", "--model-path", "/x"]}})
    assert error.field_path == "sglang_layouts.ep8.args.served-model-name[1]" and "argparse" in error.problem
    refused(parse_layout, "ep8", {"args": {"served-model-name": "--tp-size"}})
    refused(parse_layout, "ep8", {"args": {"served-model-name": "-x"}})
    assert parse_layout("ep8", {"args": {"cuda-graph-bs": [-1, "-2"]}}).args["cuda-graph-bs"] == [-1, "-2"]


def test_common_args_are_checked_like_a_layouts_own():
    error = refused(parse_layouts, {"ep8": {}}, common_args={"hos": "0.0.0.0"})
    assert error.field_path == "sglang_common_args.hos"


@pytest.mark.parametrize("name", ["api-key", "admin-api-key", "ssl-keyfile-password"])
def test_secrets_are_refused_in_args_and_not_echoed(name):
    error = refused(parse_layout, "ep8", {"args": {name: "sk-very-secret-value"}})
    assert "sk-very-secret-value" not in str(error) and "Vault" in str(error)


# --- 3. secrets reach SGLang through a file, never the command line ---------------------------------


def test_secrets_are_passed_as_a_credential_file_never_in_argv():
    layout = parse_layout("ep8", {"tp": 8})
    spec = specs.spec(layout, secrets_source="/etc/sglang/secrets/k26.yaml").to_dict()
    assert spec["argv"][-2:] == ["--config", command.SECRETS_FILE_IN_UNIT]
    assert spec["exec_start"].endswith("--config %d/sglang-secrets.yaml")  # %d: the only specifier left unescaped
    assert spec["credential_line"] == "sglang-secrets.yaml:/etc/sglang/secrets/k26.yaml"
    assert spec["command"].endswith("--config '$CREDENTIALS_DIRECTORY/sglang-secrets.yaml'")
    plain = specs.spec(layout).to_dict()
    assert "--config" not in plain["argv"] and plain["credential_line"] == ""
    # A declared value that spells the credential path is still escaped: only our own word is special.
    own = parse_layout("ep8", {"args": {"served-model-name": "%d/sglang-secrets.yaml x"}})
    rendered = specs.spec(own).exec_start
    assert '"%%d/sglang-secrets.yaml x"' in rendered


def test_listening_beyond_loopback_without_a_key_is_warned():
    layout = parse_layout("ep8", {"tp": 8})
    exposed = check_layout(layout, Facts(gpu_count=8, host="0.0.0.0"))
    assert [f.rule for f in exposed.warnings] == ["exposure"]
    assert not check_layout(layout, Facts(gpu_count=8, host="0.0.0.0", api_key_set=True)).warnings
    assert not check_layout(layout, Facts(gpu_count=8, host="127.0.0.1")).warnings


# --- 4. the sandbox ------------------------------------------------------------------------------


def test_hardening_defaults_and_overrides():
    state = "/var/lib/sglang"
    lines = hardening.unit_lines(hardening.merged(state))
    for wanted in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        f"ReadWritePaths={state}",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=",
        "DevicePolicy=closed",
        "DeviceAllow=char-nvidia-uvm rw",
        "LimitMEMLOCK=infinity",
        "SystemCallArchitectures=native",
        "UMask=0077",
    ):
        assert wanted in lines
    assert not any(line.startswith(("MemoryDenyWriteExecute", "PrivateDevices", "PrivateUsers")) for line in lines)
    layout = parse_layout("ep8", {"hardening": {"SystemCallFilter": None, "ProtectHome": False, "ReadOnlyPaths": ["/a", "/b"]}})
    merged = hardening.unit_lines(hardening.merged(state, {"UMask": "0027"}, layout.hardening))
    assert not any(line.startswith("SystemCallFilter") for line in merged)
    assert "ProtectHome=no" in merged and "UMask=0027" in merged
    assert merged.count("ReadOnlyPaths=/a") == 1 and "ReadOnlyPaths=/b" in merged


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (
            {"AmbientCapabilities": "CAP_DAC_OVERRIDE CAP_SETUID CAP_SYS_ADMIN CAP_SYS_PTRACE"},
            "CAP_DAC_OVERRIDE, CAP_SETUID, CAP_SYS_ADMIN",
        ),
        ({"CapabilityBoundingSet": "cap_sys_admin"}, "would grant CAP_SYS_ADMIN"),
        ({"CapabilityBoundingSet": "~CAP_SYS_PTRACE"}, "an inverted list"),
        ({"CapabilityBoundingSet": None}, "every capability's bound"),
    ],
)
def test_an_override_may_relax_the_sandbox_but_not_grant_privileges(overrides, said):
    """Such a unit once deployed with rc 0 and no warning, its server holding CAP_SYS_ADMIN."""
    error = refused(parse_layout, "ep8", {"hardening": overrides})
    assert said in error.problem and "CAP_SYS_PTRACE" in error.fix
    with pytest.raises(DeclarationError, match=said.split(",")[0]):
        hardening.parse_overrides("sglang_service_hardening", overrides)


def test_a_granted_capability_on_the_short_list_is_said_in_preflight():
    grant = {"AmbientCapabilities": "CAP_SYS_PTRACE", "CapabilityBoundingSet": "CAP_SYS_PTRACE"}
    layout = parse_layout("ep8", {"tp": 8, "ep": 8, "hardening": grant})
    assert "AmbientCapabilities=CAP_SYS_PTRACE" in hardening.unit_lines(hardening.merged("/var/lib/sglang", layout.hardening))
    [warning] = [f for f in check_layout(layout, Facts(gpu_count=8, host="127.0.0.1")).warnings if f.rule == "privileges"]
    assert "granted CAP_SYS_PTRACE" in warning.message and "pidfd_getfd" in warning.message
    plain = parse_layout("ep8", {"tp": 8, "ep": 8})
    facts = Facts(gpu_count=8, host="127.0.0.1", hardening=hardening.parse_overrides("sglang_service_hardening", grant))
    assert [f.rule for f in check_layout(plain, facts).warnings] == ["privileges"]


# --- 5. bad input: a message and exit 2, never a traceback ------------------------------------------


def run_cli(repo, tmp_path, group_vars: str, *extra: str) -> subprocess.CompletedProcess:
    path = tmp_path / "vars.yml"
    path.write_text(group_vars)
    argv = [sys.executable, "-m", "sglang_layout", "preflight", "--group-vars", str(path), *extra]
    return subprocess.run(argv, capture_output=True, text=True, cwd=repo, timeout=60, check=False)


BASE = "sglang_layouts: {ep8: {tp: 8, ep: 8}}\n"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (BASE + "sglang_gpu_count: '8'\n", "sglang_gpu_count"),
        (BASE + "sglang_gpu_count: 0\n", "sglang_gpu_count"),
        (BASE + "sglang_gpu_memory_gib: '95'\n", "sglang_gpu_memory_gib"),
        (BASE + "sglang_gpu_memory_gib: -1\n", "sglang_gpu_memory_gib"),
        (BASE + "sglang_port: abc\n", "sglang_port"),
        (BASE + "sglang_port: 99999\n", "sglang_port"),
        (BASE + "sglang_model_slug: x/../../escaped\n", "sglang_model_slug"),
        ("sglang_layouts:\n  ep8: {tp: 8}\n  ep8: {tp: 4}\n", "twice"),
        ("sglang_layouts: {ep8: {tp: 8, args: {moe-dp-size: 0}}}\n", "moe-dp-size"),
        ("sglang_layouts: {ep8: {tp: 10000000}}\n", "tp"),
        ("sglang_layouts: [\n", "not valid YAML"),
    ],
)
def test_cli_refuses_bad_declarations_with_exit_2(repo, tmp_path, text, field):
    done = run_cli(repo, tmp_path, text)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and field in done.stderr and "Fix:" in done.stderr


@pytest.mark.parametrize(
    "content",
    ["{", "[]", '{"options": [{"names": "x"}]}', '{"options": {}}', "not help text", '{"options": [1]}', "[" * 100000],
)
def test_cli_refuses_a_malformed_flag_table(repo, tmp_path, content):
    table = tmp_path / "table.json"
    table.write_text(content)
    done = run_cli(repo, tmp_path, BASE, "--flag-table", str(table))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "flag_table_path" in done.stderr
    directory = run_cli(repo, tmp_path, BASE, "--flag-table", str(tmp_path))
    assert directory.returncode == 2 and "is a directory" in directory.stderr


@pytest.mark.parametrize(
    "change",
    [
        {"num_attention_heads": 0},
        {"hidden_size": "7168"},
        {"num_hidden_layers": 1_000_000_000},
        {"quantization_config": ["int4"]},
        {"quantization_config": "int4"},
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, "x"]}},
        {"architectures": "DeepseekV3"},
    ],
)
def test_cli_refuses_a_malformed_model_config_in_words(repo, tmp_path, kimi_config, change):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**kimi_config, **change}))
    done = run_cli(repo, tmp_path, BASE + "sglang_gpu_count: 8\nsglang_gpu_memory_gib: 95\n", "--model-config", str(config))
    assert "Traceback" not in done.stderr, done.stderr
    assert "memory fit not checked" in done.stdout  # the estimate says why; the other rules still run


def test_a_string_total_size_in_the_index_is_refused_in_words(repo, tmp_path, kimi_config):
    (tmp_path / "config.json").write_text(json.dumps(kimi_config))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": "many"}}))
    done = run_cli(
        repo, tmp_path, BASE + "sglang_gpu_count: 8\nsglang_gpu_memory_gib: 95\n", "--model-config", str(tmp_path / "config.json")
    )
    assert "Traceback" not in done.stderr and "total_size" in done.stdout


def test_repository_declaration_loads_through_the_strict_loader(repo):
    declaration = declaration_from_vars(load_yaml_vars([repo / "group_vars" / "sglang_servers.yml"]))
    assert declaration.model_slug == "k26" and declaration.port == 30001
