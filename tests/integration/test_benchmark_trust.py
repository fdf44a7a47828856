"""The benchmark never stores or shows a secret, never lets Ansible template what was typed, and refuses bad input in words."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from benchmarks import results
from tests.rehearsal.bench import REPO, benchmarks, benchmarks_argv, tool_env
from tests.rehearsal.standin import emitted, serving_locally

FAST = ["--output-tokens", "8", "--input-tokens", "4", "--min-requests", "2", "--rounds", "1", "--level-timeout", "60"]
# Jinja in a key or model name must reach Locust as written (a templated key would get 401s).
KEY = "k{{ 6*7 }}-0123456789abcdef"


def bench(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return benchmarks(*args, env=env, timeout=timeout)


def test_a_keyed_server_is_measured_with_its_key_and_no_secret_is_stored(tmp_path, private_tmp):
    flags = ("--api-key", KEY, "--admin-api-key", "admin-0123456789abcdef", "--ssl-keyfile-password", "pw-9876")
    with serving_locally(tmp_path, *flags, load_seconds=0.1, itl_ms={"default": 5.0}) as url:
        done = bench(
            "run",
            "--url",
            url,
            "--levels",
            "1",
            *FAST,
            "--model",
            "m{{ 6*7 }}",
            "--results-dir",
            str(tmp_path / "r"),
            env={"SGLANG_API_KEY": KEY, "TMPDIR": str(private_tmp)},
        )
        unauthorized = bench("run", "--url", url, "--levels", "1", *FAST, "--results-dir", str(tmp_path / "none"))
    assert done.returncode == 0, done.stdout + done.stderr
    (saved,) = (tmp_path / "r").rglob("*.json")
    text = saved.read_text()
    for secret in ("0123456789abcdef", "pw-9876"):
        assert secret not in text and secret not in done.stdout + done.stderr
    run = json.loads(text)
    assert run["server"]["server_args"]["api_key"] == "<redacted>"  # the server did return it: SGLang does
    assert run["server"]["server_args"]["ssl_keyfile_password"] == "<redacted>"
    assert run["workload"]["model"] == "m{{ 6*7 }}" and run["levels"][0]["completed"] == 2
    assert list(private_tmp.iterdir()) == []  # the runner's directory, with the vars file holding the key, is gone
    assert unauthorized.returncode == 2 and "refused the request (401)" in unauthorized.stderr


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://[::1", "is malformed"),
        ("http://a b:1", "is malformed"),
        ("http://127.0.0.1:99999", "is malformed"),
        ("http://user:hunter2-secret@127.0.0.1:9", "user or password"),
    ],
)
def test_bad_urls_are_refused_in_words_and_never_echo_a_password(tmp_path, url, words):
    done = bench("run", "--url", url, "--levels", "1", *FAST, "--results-dir", str(tmp_path))
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "hunter2" not in done.stderr + done.stdout
    for path in tmp_path.rglob("*"):
        assert "hunter2" not in str(path) and (path.is_dir() or "hunter2" not in path.read_text())


@pytest.mark.parametrize(
    "option",
    [
        ["--vocab-size", "0"],
        ["--rounds", "-1"],
        ["--warmup", "-5"],
        ["--levels", "0"],
        ["--processes", "x"],
        ["--metrics-interval", "nan"],
    ],
)
def test_out_of_range_numbers_are_refused(tmp_path, option):
    done = bench("run", "--url", "http://127.0.0.1:9", *option, "--results-dir", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr and option[0] in done.stderr, done.stderr
    assert not list(tmp_path.rglob("*.json"))


def test_a_very_long_layout_name_still_gives_a_saved_record(tmp_path):
    done = bench("run", "--url", "http://127.0.0.1:9", "--layout", "x" * 300, *FAST, "--results-dir", str(tmp_path))
    assert done.returncode == 2 and "is unreachable" in done.stderr
    (saved,) = tmp_path.rglob("*.json")
    assert len(saved.parent.name) <= results.MAX_NAME and json.loads(saved.read_text())["status"] == "failed"


def test_compare_skips_and_names_files_it_cannot_read(tmp_path):
    good = {
        "kind": "sglang-benchmark-run",
        "status": "complete",
        "server": {"host": "h", "layout": "ep8"},
        "levels": [
            {
                "concurrency": 1,
                "status": "ok",
                "completed": 4,
                "aggregate_tok_s": 60.0,
                "decode_tok_s": {"p50": 60.0},
                "ttft_ms": {"p50": 20.0},
                "itl_ms": {"p50": 16.0},
            }
        ],
    }
    results.save_record(good, tmp_path, "h", "ep8")
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "h" / "old.json").write_text(
        json.dumps({"kind": "sglang-benchmark-run", "levels": [{"concurrency": 1, "status": "ok", "completed": 3}]})
    )
    done = bench("compare", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "ep8" in done.stdout and "60.0" in done.stdout
    assert "skipped" in done.stderr and "broken.json" in done.stderr and "old.json" in done.stderr


@pytest.fixture
def small_disk(tmp_path):
    """A folder on a 64 KiB tmpfs (a mount: root only, as every box test)."""
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def fill(folder) -> None:
    subprocess.run(["dd", "if=/dev/zero", f"of={folder / 'filler'}", "bs=4k"], capture_output=True, check=False)


def test_a_disk_already_full_is_refused_before_anything_is_measured(tmp_path, small_disk):
    fill(small_disk)
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 5.0}) as url:
        before = emitted(url)["times"]  # the health check's token
        done = bench("run", "--url", url, "--levels", "1", *FAST, "--results-dir", str(small_disk))
        sent = emitted(url)["times"][len(before) :]
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--results-dir" in done.stderr and "No space left on device" in done.stderr and "free some space" in done.stderr
    assert "Traceback" not in done.stderr and sent == []  # refused before the first token
    assert sorted(path.name for path in small_disk.rglob("*") if path.is_file()) == ["filler"]


def test_a_disk_that_fills_mid_run_loses_no_figure_and_leaves_no_partial_record(tmp_path, small_disk):
    slow = [*FAST, "--output-tokens", "200"]  # 200 tokens at 20 ms: each request streams for about 4 s
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 20.0}) as url:
        before = len(emitted(url)["times"])
        argv = benchmarks_argv("run", "--url", url, "--levels", "1", *slow, "--results-dir", str(small_disk))
        with subprocess.Popen(argv, cwd=REPO, env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
            deadline = time.monotonic() + 60
            while len(emitted(url)["times"]) == before and time.monotonic() < deadline and run.poll() is None:
                time.sleep(0.05)
            fill(small_disk)  # the up-front check has passed: the run is measuring
            stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 1, stdout + stderr
    assert "C=1" in stdout and "complete" in stdout  # the level table, printed before the save failed
    assert "could not be saved" in stderr and "No space left on device" in stderr
    assert "Traceback" not in stderr
    assert sorted(path.name for path in small_disk.rglob("*") if path.is_file()) == ["filler"]
