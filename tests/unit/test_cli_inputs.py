"""`python -m benchmarks` refuses bad input before anything is measured, and loses nothing to a full disk."""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import cli, compare, inventory, results, sweep
from tests.rehearsal.playbook import REPO

UNREACHABLE = "http://127.0.0.1:1"


def refused(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(("layouts", "said"), [("", "--layouts ''"), (",", "--layouts ','"), (" , ", "--layouts ' , '")])
def test_an_empty_layout_list_is_refused_not_read_as_every_layout(capsys, tmp_path, layouts, said):
    err = refused(capsys, "search", "--server-host", "h", "--layouts", layouts, "--results-dir", str(tmp_path))
    assert said in err and "'all'" in err


@pytest.mark.parametrize("option", ["--levels", "--request-rates"])
def test_an_empty_item_in_a_list_of_loads_is_a_typo_not_skipped(capsys, option):
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--url", UNREACHABLE, option, "1,,2"])
    assert exited.value.code == 2 and "1,,2" in capsys.readouterr().err


def test_a_results_dir_that_is_a_file_fails_before_anything_is_measured(capsys, tmp_path):
    taken = tmp_path / "results"
    taken.write_text("")
    err = refused(capsys, "run", "--url", UNREACHABLE, "--results-dir", str(taken))
    assert f"--results-dir {taken}: is a file" in err and "benchmarking" not in capsys.readouterr().out


@pytest.mark.parametrize("command", ["run", "search"])
@pytest.mark.parametrize("folder", ["/proc", "/proc/self/new", "/sys/kernel"])
def test_a_results_dir_on_a_kernel_file_system_is_refused_before_anything_runs(capsys, command, folder):
    where = ["--url", UNREACHABLE] if command == "run" else ["--server-host", "h"]
    err = refused(capsys, command, *where, "--results-dir", folder)
    assert f"--results-dir {folder}: is on " in err and "a kernel file system" in err
    assert "preflight" not in capsys.readouterr().out and not Path("/proc/self/new").exists()


def test_the_file_system_of_a_folder_is_its_deepest_mount_point():
    mountinfo = (
        "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
        "23 22 0:22 / /proc rw - proc proc rw\n"
        "24 22 0:23 / /mnt/my\\040disk rw - tmpfs tmpfs rw\n"
        "25 22 0:24 / /procedures rw - xfs /dev/sdb rw\n"
    )
    assert results.filesystem_type(Path("/proc/1"), mountinfo) == "proc"
    assert results.filesystem_type(Path("/procedures/x"), mountinfo) == "xfs"
    assert results.filesystem_type(Path("/mnt/my disk/r"), mountinfo) == "tmpfs"
    assert results.filesystem_type(Path("/home/r"), mountinfo) == "ext4"


@pytest.mark.parametrize(
    ("code", "said"), [(errno.ENOSPC, "free some space"), (errno.EROFS, "read-only"), (errno.EIO, "name a folder you can")]
)
def test_a_failed_write_is_told_by_its_cause(code, said):
    assert said in results.write_fix(OSError(code, os.strerror(code)))


def test_a_malformed_url_is_refused_and_leaves_no_record(capsys, tmp_path):
    err = refused(capsys, "run", "--url", "http://127.0.0.1:1/\x1b[31m", "--results-dir", str(tmp_path / "r"))
    assert "malformed" in err and not list((tmp_path / "r").rglob("*.json"))


def test_an_unreachable_endpoint_is_still_recorded_as_failed(capsys, tmp_path):
    err = refused(capsys, "run", "--url", UNREACHABLE, "--results-dir", str(tmp_path / "r"))
    (record,) = (json.loads(path.read_text()) for path in (tmp_path / "r").rglob("*.json"))
    assert record["status"] == "failed" and "recorded as failed" in err


def test_a_full_disk_leaves_no_partial_record(tmp_path, monkeypatch):
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results.json, "dump", no_space)
    with pytest.raises(OSError, match="No space left"):
        results.save_record({"levels": [1]}, tmp_path, "host", "layout")
    assert [path.name for path in tmp_path.rglob("*") if path.is_file()] == []


def test_the_api_key_variable_is_taken_out_before_any_child_can_inherit_it(monkeypatch, tmp_path):
    """The record's `git describe` is the first child of a run: it must not see the key (it did, once)."""
    seen_by_children: list[str | None] = []

    def first_child() -> str:
        seen_by_children.append(os.environ.get("SGLANG_API_KEY"))
        raise SystemExit(7)  # enough: what matters is what it saw

    monkeypatch.setenv("SGLANG_API_KEY", "sk-test-not-real")
    monkeypatch.setattr(results, "project_commit", first_child)
    with pytest.raises(SystemExit):
        cli.main(["run", "--url", UNREACHABLE, "--results-dir", str(tmp_path / "r")])
    assert seen_by_children == [None]
    assert "SGLANG_API_KEY" not in os.environ
    args = cli.build_parser().parse_args(["run", "--url", UNREACHABLE])
    args.environment_key = "sk-test-not-real"
    assert cli.api_key(args) == "sk-test-not-real"
    monkeypatch.setenv("SGLANG_API_KEY", "again")
    assert "SGLANG_API_KEY" not in inventory.tool_env()


def test_the_inventory_is_read_into_memory_with_the_tools_beside_the_interpreter(tmp_path, monkeypatch):
    """Through .venv/bin/python without .venv/bin on PATH (the README's way); nothing lands in the temp dir."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert inventory.tool("ansible-inventory") == str(Path(sys.executable).parent / "ansible-inventory")
    read = inventory.read_inventory(REPO / "inventory" / "hosts.yml")
    assert read.groups["sglang_servers"] == ["gpu-box-1"]
    assert "ep8" in read.declaration("gpu-box-1", REPO / "inventory")["sglang_layouts"]
    with pytest.raises(inventory.InventoryError, match=r"--server-host nosuch: not in the inventory .* name one of: gpu-box-1"):
        read.require(["gpu-box-1", "nosuch"], REPO / "inventory", "--server-host")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("option", "said"),
    [("--server-host", "--server-host nosuch: not in the inventory"), ("--loadgen-hosts", "--loadgen-hosts nosuch")],
)
def test_a_host_missing_from_the_inventory_is_refused_before_a_level_runs(capsys, tmp_path, option, said):
    where = ["--server-host", "gpu-box-1"] if option == "--loadgen-hosts" else []
    err = refused(capsys, "run", *where, option, "nosuch", "--results-dir", str(tmp_path / "r"))
    assert (said in err and "name one of: gpu-box-1" in err and not (tmp_path / "r").exists()) or not list(
        (tmp_path / "r").iterdir()
    )


def test_compare_escapes_what_a_stored_record_names(tmp_path, capsys):
    record = {
        "kind": "sglang-benchmark-run",
        "status": "complete",
        "server": {"host": "box\x1b]0;owned\x07", "layout": "ep8\nforged row"},
        "levels": [],
    }
    folder = tmp_path / "box" / "ep8"
    folder.mkdir(parents=True)
    (folder / "20260101T000000Z.json").write_text(json.dumps(record))
    assert compare.command_compare([tmp_path], markdown_path=tmp_path / "table.md") == 0
    shown = capsys.readouterr().out + (tmp_path / "table.md").read_text()
    assert "\x1b" not in shown and "\x07" not in shown and "ep8\\nforged row" in shown


def test_an_unreachable_host_is_named_with_ssh_s_own_words():
    unreachable = {
        "event": "runner_on_unreachable",
        "event_data": {"host": "gpu-box-1", "res": {"msg": "ssh: connect to host 10.0.0.5 port 22: Connection refused"}},
    }
    runner = SimpleNamespace(events=[unreachable], status="failed")
    reason = sweep._failure_reason(runner, [])
    assert reason.startswith("gpu-box-1 is unreachable over SSH (ssh: connect to host 10.0.0.5 port 22: Connection refused)")


def test_the_subcommands_are_one_table_and_the_search_options_come_from_its_fields():
    from benchmarks.search.runner import SearchOptions

    assert [command.name for command in cli.commands()] == ["run", "search", "harness", "compare"]
    args = cli.build_parser().parse_args(
        ["search", "--server-host", "gpu-1", "--layouts", "ep8, tp8", "--knee", "0.1", "--leave", "original", "--levels", "1,4"]
    )
    assert args.handle is cli.command_search
    options = SearchOptions.from_cli_args(args, grid=[("max-running-requests", (64,))], api_key="k" * 16)
    assert (options.server_host, options.layouts, options.knee, options.leave) == ("gpu-1", ["ep8", "tp8"], 0.1, "original")
    assert options.workload.levels == [1, 4] and options.grid == [("max-running-requests", (64,))]
    assert options.api_key == "k" * 16 and options.max_probes == SearchOptions.max_probes


@pytest.mark.parametrize(
    ("text", "seconds"), [("4h", 14400.0), ("90m", 5400.0), ("300s", 300.0), ("300", 300.0), ("1.5H", 5400.0)]
)
def test_a_budget_reads_as_hours_minutes_or_seconds(text, seconds):
    args = cli.build_parser().parse_args(["search", "--server-host", "box", "--budget", text])
    assert args.budget == seconds


@pytest.mark.parametrize("text", ["4 hours", "0", "0.0h", "h", "31d"])
def test_a_budget_that_is_no_duration_is_refused_in_words(capsys, text):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["search", "--server-host", "box", "--budget", text])
    said = capsys.readouterr().err
    assert "--budget" in said and (f"{text!r}" in said)
