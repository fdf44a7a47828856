"""Run records: saved whole, never overwritten, on any file system, with no secret in them."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import results
from sglang_layout import secrets


def test_records_are_saved_where_hard_links_fail_and_never_overwritten(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")  # as vfat and some FUSE mounts answer

    monkeypatch.setattr(os, "link", no_links)
    first = results.save_record({"n": 1}, tmp_path, "h", "l", stamp="20260101T000000Z")
    second = results.save_record({"n": 2}, tmp_path, "h", "l", stamp="20260101T000000Z")
    assert (first.name, second.name) == ("20260101T000000Z.json", "20260101T000000Z-1.json")
    assert [json.loads(p.read_text())["n"] for p in (first, second)] == [1, 2]
    assert not list(tmp_path.rglob(".partial-*"))


def test_names_are_bounded_and_distinct():
    long_a, long_b = "a" * 300, "a" * 299 + "b"
    assert len(results.safe_name(long_a)) <= results.MAX_NAME
    assert results.safe_name(long_a) != results.safe_name(long_b)
    assert results.safe_name("../../etc") == "etc" and results.safe_name("") == "unknown"


@pytest.mark.parametrize("key", ["api_key", "admin_api_key", "ssl_keyfile_password", "API_KEY"])
def test_secret_keys_and_url_passwords_are_redacted(key):
    record = {"server": {"server_args": {key: "s3cret", "tp_size": 8, "other": ["http://u:pw@h:1/x"]}}}
    clean = secrets.redact(record)
    assert clean["server"]["server_args"][key] == "<redacted>" and clean["server"]["server_args"]["tp_size"] == 8
    assert clean["server"]["server_args"]["other"] == ["http://<redacted>@h:1/x"]
    assert "s3cret" not in json.dumps(clean) and "pw" not in json.dumps(clean)
    assert secrets.redact({"api_key": None}) == {"api_key": None}


def test_secret_problems_never_echo_the_secret():
    found = secrets.problems(
        {"sglang_api_key": "short", "sglang_admin_api_key": "-" + "x" * 20, "sglang_ssl_keyfile_password": "a b"}
    )
    assert len(found) == 3 and not any("short" in line or "xxxx" in line or "a b" in line for line in found)
    assert secrets.config_yaml({"sglang_api_key": "k" * 32}) == f"api-key: {'k' * 32}\n"
    assert secrets.config_yaml({}) == ""
