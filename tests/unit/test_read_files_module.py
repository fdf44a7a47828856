"""plugins/modules/sglang_read_files.py: what stat and slurp gave preflight, in one call (the box tiers run it too)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[2] / "plugins" / "modules" / "sglang_read_files.py"


def run_module(**params: object) -> dict:
    """The module as Ansible runs it: its arguments as JSON on stdin (ANSIBLE_MODULE_ARGS), its answer on stdout."""
    done = subprocess.run(
        [sys.executable, str(MODULE)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": params}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return json.loads(done.stdout)


def test_each_file_as_stat_and_slurp_gave_it(tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"num_hidden_layers": 61}')
    answer = run_module(paths={"config": str(config), "index": str(tmp_path / "model.safetensors.index.json")})
    assert not answer.get("failed") and not answer["changed"]
    files = answer["files"]
    assert files["config"]["exists"] and base64.b64decode(files["config"]["content"]) == config.read_bytes()
    assert files["config"]["checksum"] == hashlib.sha1(config.read_bytes()).hexdigest()
    assert files["index"] == {"path": str(tmp_path / "model.safetensors.index.json"), "exists": False}


def test_a_required_file_that_is_missing_fails_naming_it(tmp_path):
    answer = run_module(paths={"flag_table": str(tmp_path / "flags.json")}, required=["flag_table"])
    assert answer["failed"] and f"{tmp_path / 'flags.json'} (flag_table)" in answer["msg"]


@pytest.mark.parametrize("kind", ["directory", "too large"])
def test_a_path_that_cannot_be_read_whole_fails_naming_it(tmp_path, kind):
    path = tmp_path / "config.json"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"x" * 2048)
    answer = run_module(paths={"config": str(path)}, max_bytes=1024)
    assert answer["failed"] and f"cannot read {path} (config)" in answer["msg"]


def flag_table_of(facts: Path, version: str) -> dict:
    """Preflight's read of the flag table the venv record names for `version` (required when it names one)."""
    return run_module(
        facts_dir=str(facts),
        local_facts=["sglang_venv"],
        paths_from_facts={"flag_table": ["sglang_venv", "versions", version, "flag_table"]},
        required=["flag_table"],
    )


def test_the_records_and_a_file_one_of_them_names_in_the_same_call(tmp_path):
    """Preflight's one read: the local facts asked for (as setup's `local` subset gave them) and the flag table the
    install's record names; a record that is not there is left out, as setup left it out."""
    facts = tmp_path / "facts.d"
    facts.mkdir()
    table = tmp_path / "flags.json"
    table.write_text('{"options": []}')
    (facts / "sglang_venv.fact").write_text(json.dumps({"versions": {"0.5.23": {"flag_table": str(table)}}}))
    (facts / "sglang_gpus.fact").write_text('{"count": 8}')
    (facts / "someone_elses.fact").write_text('{"not": "asked for"}')
    answer = run_module(
        paths={},
        facts_dir=str(facts),
        local_facts=["sglang_gpus", "sglang_venv", "cuda_toolkit"],
        paths_from_facts={"flag_table": ["sglang_venv", "versions", "0.5.23", "flag_table"]},
        required=["flag_table"],
    )
    assert not answer.get("failed"), answer
    assert set(answer["ansible_facts"]["ansible_local"]) == {"sglang_gpus", "sglang_venv"}
    assert base64.b64decode(answer["files"]["flag_table"]["content"]) == table.read_bytes()
    # A record that names no table for the version reads none, and requires none.
    other = flag_table_of(facts, "0.6.0")
    assert not other.get("failed") and other["files"] == {}
    # The table it names must be there.
    table.unlink()
    gone = flag_table_of(facts, "0.5.23")
    assert gone["failed"] and f"{table} (flag_table)" in gone["msg"]


def test_a_record_that_is_not_json_fails_naming_it_and_the_fix(tmp_path):
    (tmp_path / "sglang_gpus.fact").write_text("count=8\n")
    answer = run_module(paths={}, facts_dir=str(tmp_path), local_facts=["sglang_gpus"])
    assert answer["failed"] and f"the record {tmp_path / 'sglang_gpus.fact'} is not JSON" in answer["msg"]
    assert "run playbooks/provision.yml again" in answer["msg"]
