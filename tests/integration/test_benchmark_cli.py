"""`python -m benchmarks run` against a local stand-in server: stored runs, failures recorded, interruptions."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.levels import read_level
from benchmarks.metrics import level_metrics
from tests.rehearsal.bench import benchmarks, benchmarks_argv, tool_env
from tests.rehearsal.playbook import REPO
from tests.rehearsal.standin import emitted, serving_locally

FAST = ["--output-tokens", "16", "--input-tokens", "8", "--min-requests", "4", "--rounds", "2", "--level-timeout", "60"]


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return benchmarks(*args, timeout=timeout)


def stored(results_dir: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(results_dir.rglob("*.json"))]


def test_a_run_is_stored_and_never_overwritten_and_compare_reads_it(tmp_path):
    with serving_locally(tmp_path, "--enable-metrics", load_seconds=0.1, itl_ms={"default": 10.0}) as url:
        for _ in range(2):
            done = bench(
                "run",
                "--url",
                url,
                "--levels",
                "1,4",
                *FAST,
                "--layout",
                "tiny",
                "--metrics-interval",
                "0.1",
                "--results-dir",
                str(tmp_path / "r"),
            )
            assert done.returncode == 0, done.stdout + done.stderr
    assert "C=1: locust finished" in done.stdout and "complete" in done.stdout
    runs = stored(tmp_path / "r")
    assert len(runs) == 2 and len(list((tmp_path / "r").rglob("*.json"))) == 2
    run = runs[-1]
    assert run["status"] == "complete" and run["server"]["sglang_version"] == "0.5.23+standin"
    assert [level["concurrency"] for level in run["levels"]] == [1, 4]
    level = run["levels"][1]
    assert level["completed"] == 8 and level["length_mismatches"] == 0 and level["server_metrics"]["samples"] > 0
    assert level["bench_serving"]["output_throughput"] > 0 and run["workload"]["output_tokens"] == 16
    compared = bench("compare", str(tmp_path / "r"), "--markdown", str(tmp_path / "t.md"), "--plot", str(tmp_path / "p.png"))
    assert compared.returncode == 0, compared.stderr
    assert "tiny" in compared.stdout and (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "t.md").read_text().startswith("| host | layout |")


@pytest.mark.parametrize(
    ("url", "message", "records"),
    [
        ("localhost:30001", "is malformed: give it as http://HOST:PORT", 0),  # refused input: no record
        ("http://127.0.0.1:9", "is unreachable", 1),  # a run that failed: recorded as failed
    ],
)
def test_a_bad_or_unreachable_endpoint_is_explained_and_only_a_failed_run_is_recorded(tmp_path, url, message, records):
    done = bench("run", "--url", url, "--levels", "1", *FAST, "--results-dir", str(tmp_path))
    assert done.returncode == 2 and message in done.stderr
    runs = stored(tmp_path)
    assert len(runs) == records and all(run["status"] == "failed" and message in run["error"] for run in runs)


def test_a_server_that_returns_errors_gives_failed_levels_with_the_error(tmp_path):
    with serving_locally(tmp_path, load_seconds=0.1, fail_requests=True) as url:
        done = bench("run", "--url", url, "--levels", "1,2", *FAST, "--results-dir", str(tmp_path / "r"))
    assert done.returncode == 1
    (run,) = stored(tmp_path / "r")
    assert run["status"] == "failed" and "HTTP 500" in run["error"]
    assert [level["status"] for level in run["levels"]] == ["failed", "failed"]
    assert "HTTP 500" in done.stdout


def test_a_server_that_hangs_under_load_ends_its_level_within_the_bound_and_is_named(tmp_path):
    """Past 2 decoding requests the stand-in sends no token again (an NCCL hang): C=4 ends as a hang after the
    stall bound (3 s here), long before its level timeout (60 s), named with the known workarounds; C=1 stands."""
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 5.0}, hang_above={"default": 2}) as url:
        began = time.monotonic()
        done = bench(
            "run", "--url", url, "--levels", "1,4,8", *FAST, "--stall-timeout", "3", "--results-dir", str(tmp_path / "r")
        )
        took = time.monotonic() - began
    (run,) = stored(tmp_path / "r")
    assert [level["status"] for level in run["levels"]] == ["ok", "hung"], done.stdout  # no C=8 after a hang
    hung = run["levels"][1]
    assert hung["error"].startswith("stalled: no token from the server for ") and "requests open" in hung["error"]
    assert hung["bottleneck"]["name"] == "communication hang" and "NCCL_P2P_DISABLE=1" in hung["bottleneck"]["evidence"]
    assert took < 45 and "communication hang" in done.stdout


def test_a_knob_that_cures_the_hang_measures_every_level(tmp_path):
    cure = [{"flag": "disable-custom-all-reduce", "value": True, "cures_hang": True}]
    simulation = {"itl_ms": {"default": 5.0}, "hang_above": {"default": 2}, "effects": cure}
    with serving_locally(tmp_path, "--disable-custom-all-reduce", load_seconds=0.1, **simulation) as url:
        done = bench("run", "--url", url, "--levels", "1,4", *FAST, "--stall-timeout", "3", "--results-dir", str(tmp_path / "r"))
    (run,) = stored(tmp_path / "r")
    assert [level["status"] for level in run["levels"]] == ["ok", "ok"], done.stdout


def test_an_interrupted_run_stops_everything_it_started_and_keeps_the_levels_done(tmp_path, private_tmp):
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 10.0}) as url:
        env = tool_env(PYTHONUNBUFFERED="1", TMPDIR=str(private_tmp))
        # 100 tokens at 10 ms: each request takes a second, so C=2 is still running when Ctrl-C comes.
        argv = benchmarks_argv(
            "run",
            "--url",
            url,
            "--levels",
            "1,2",
            "--output-tokens",
            "100",
            "--min-requests",
            "2",
            "--rounds",
            "1",
            "--warmup",
            "0",
            "--results-dir",
            str(tmp_path / "r"),
            "--level-timeout",
            "60",
        )
        runner = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        seen = ""
        deadline = time.monotonic() + 120
        while "C=2: running" not in seen and time.monotonic() < deadline:
            seen += runner.stdout.readline()
        (runner_dir,) = private_tmp.glob("sglang-bench-runner-*")
        work_dir = re.search(r"bench_work_dir: !unsafe '([^']+)'", (runner_dir / "bench-vars.yml").read_text())[1]
        time.sleep(1.0)
        runner.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        out, _ = runner.communicate(timeout=60)
        stopped_in = time.monotonic() - interrupted
        leftovers = [
            " ".join(proc.info["cmdline"])
            for proc in psutil.process_iter(["cmdline"])
            if any(url in part or str(private_tmp) in part for part in proc.info["cmdline"] or [])
        ]
        # Again, stopped before its first level ends: no layout read, nothing measured, so no record under "unknown".
        early = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        said = ""
        while "C=1: running" not in said and time.monotonic() < deadline + 60:
            said += early.stdout.readline()
        early.send_signal(signal.SIGINT)
        said += early.communicate(timeout=60)[0]
    assert early.returncode == 130 and "nothing measured, nothing recorded" in said, said
    seen += out
    assert runner.returncode == 1, seen
    assert stopped_in < 15, f"took {stopped_in:.1f} s to stop"
    assert leftovers == [], leftovers
    # The runner's private directory and the load generator's records directory are gone too.
    assert list(private_tmp.iterdir()) == [] and not Path(work_dir).exists()
    (run,) = stored(tmp_path / "r")
    assert run["status"] == "interrupted", seen
    assert [level["concurrency"] for level in run["levels"]] == [1], seen
    assert run["levels"][0]["status"] == "ok" and run["levels"][0]["completed"] == 2


def test_a_level_with_fewer_users_than_processes_runs_on_as_many_processes_as_users(tmp_path):
    """C=1 with --processes 2: a second process would get no user and never send its share (the level would hang)."""
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 5.0}) as url:
        done = bench("run", "--url", url, "--levels", "1,2", *FAST, "--processes", "2", "--results-dir", str(tmp_path / "r"))
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = stored(tmp_path / "r")
    assert [(level["status"], level["completed"], level["loadgen"]["processes"]) for level in run["levels"]] == [
        ("ok", 4, 1),
        ("ok", 4, 2),
    ]
    assert max(level["duration_s"] for level in run["levels"]) < 10


def test_the_asyncio_yardstick_writes_records_the_metrics_read(tmp_path):
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 5.0}) as url:
        argv = [
            sys.executable,
            "-m",
            "benchmarks.asyncio_client",
            "--url",
            url,
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--output-tokens",
            "8",
            "--records",
            str(tmp_path / "r.jsonl"),
        ]
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
    records, _ = read_level(tmp_path / "r.jsonl")
    measured = [r for r in records if r.phase == "measured"]
    assert len(measured) == 4 and all(r.ok and r.output_tokens == 8 for r in measured)
    assert [r.phase for r in records[:2]] == ["warmup", "warmup"]
    assert level_metrics(records, 2)["completed"] == 4


def test_each_level_says_how_busy_the_load_generator_was(tmp_path):
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 10.0}) as url:
        done = bench("run", "--url", url, "--levels", "2", *FAST, "--results-dir", str(tmp_path / "r"))
        assert done.returncode == 0, done.stdout + done.stderr
    (run,) = stored(tmp_path / "r")
    usage = run["levels"][0]["loadgen"]
    # A few streams at 100 tok/s keep one Locust process far below a core.
    assert usage["processes"] == 1 and 0 < usage["busiest_cpu_fraction"] < 0.7 and usage["client_bound"] is False
    assert "client cpu %" in done.stdout


def test_range_ratio_draws_each_requests_lengths_within_the_range(tmp_path):
    """--range-ratio 0.5 --output-tokens 16: every request asks for 8..16 tokens, the server gives exactly that."""
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 2.0}) as url:
        runs = []
        for name in ("a", "b"):
            done = bench(
                "run",
                "--url",
                url,
                "--levels",
                "4",
                *FAST,
                "--range-ratio",
                "0.5",
                "--rounds",
                "8",
                "--results-dir",
                str(tmp_path / name),
            )
            assert done.returncode == 0, done.stdout + done.stderr
            (run,) = stored(tmp_path / name)
            runs.append(run["levels"][0])
    level = runs[0]
    assert level["length_mismatches"] == 0 and level["completed"] == 32
    lengths = level["output_len"]
    assert 8 <= lengths["mean"] <= 16 and lengths["p90"] > lengths["p50"] > 8  # they vary, inside the range
    assert runs[1]["output_tokens"] == level["output_tokens"]  # the same seed draws the same lengths


def test_flush_cache_empties_the_prefix_cache_before_each_level(tmp_path):
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 2.0}) as url:
        done = bench("run", "--url", url, "--levels", "1,2", *FAST, "--flush-cache", "--results-dir", str(tmp_path / "r"))
        assert done.returncode == 0, done.stdout + done.stderr
        assert emitted(url)["flushes"] == 2
