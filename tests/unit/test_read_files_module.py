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
