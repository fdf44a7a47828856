"""`python -m benchmarks run` held to the stand-in's clock: what the client measures against what the server sent.

Every rate is held to what the stand-in sent in the level's window (its own log, on the client's clock),
and to the nominal clock within a tolerance measured beside a loaded machine, so the module runs beside
the other worker, not `alone`: three times in a row beside box modules (test_deploy.py, test_swap_faults.py,
test_router.py, test_deploy_trust.py in another process, the CPU 23-58% idle), no test failed.
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.metrics import inter_token_gaps
from tests.integration.test_benchmark_cli import FAST, bench, stored
from tests.rehearsal.standin import emitted, sent_decode_rate, sent_streams, serving_locally


def test_two_load_generator_processes_measure_the_same_counts_and_rates(tmp_path):
    """64-token streams (0.63 s): a reader's few ms of lag beside a busy core stay well inside 2%."""
    workload = ("--output-tokens", "64", "--input-tokens", "8", "--min-requests", "8", "--rounds", "2", "--level-timeout", "60")
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 10.0}) as url:
        done = bench("run", "--url", url, "--levels", "8", *workload, "--processes", "2", "--results-dir", str(tmp_path / "r"))
        streams = sent_streams(emitted(url))
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = stored(tmp_path / "r")
    (level,) = run["levels"]
    assert (level["requests"], level["completed"], level["failed"]) == (16, 16, 0)
    assert level["decode_tok_s"]["p50"] == pytest.approx(sent_decode_rate(streams, level["window"]), rel=0.02)
    assert level["decode_tok_s"]["p50"] == pytest.approx(100.0, rel=0.03)
    assert level["achieved_concurrency"] == pytest.approx(8, rel=0.05)


@pytest.mark.parametrize(("continuous_usage", "source"), [(True, "continuous_usage"), (False, "spread")])
def test_chat_deltas_of_several_tokens_give_per_token_itl(tmp_path, continuous_usage, source):
    """3 tokens per delta at a 10 ms clock: ITL is 10 ms per token, not 30 ms per delta (nor 0).

    90-token streams: with 30, a client beside a busy core measured 3.2% under the clock (its lag at a
    stream's end against 0.29 s); a third of that lag's share now."""
    simulation = {"load_seconds": 0.1, "itl_ms": {"default": 10.0}, "stream_interval": 3, "continuous_usage": continuous_usage}
    with serving_locally(tmp_path, **simulation) as url:
        done = bench(
            *("run", "--url", url, "--levels", "1,4", "--output-tokens", "90", "--input-tokens", "8"),
            *("--min-requests", "8", "--rounds", "2", "--level-timeout", "60", "--results-dir", str(tmp_path / "r")),
        )
        streams = sent_streams(emitted(url))
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = stored(tmp_path / "r")
    for level in run["levels"]:
        assert level["count_sources"] == {source: level["completed"]}
        assert level["itl_ms"]["p50"] == pytest.approx(10.0, rel=0.03), level["itl_ms"]
        assert level["decode_tok_s"]["p50"] == pytest.approx(sent_decode_rate(streams, level["window"]), rel=0.02)
        assert level["decode_tok_s"]["p50"] == pytest.approx(100.0, rel=0.03)
        assert level["stream_count_mismatches"] == 0 and level["output_tokens"] == 90 * level["completed"]


def hold_to_the_clock(tmp_path, endpoint: str, tokens_per_delta: int, levels: str, output_tokens: int) -> None:
    """Per-request decode rate and per-token ITL: the client's against what the stand-in sent in each level's window."""
    tmp_path.mkdir()
    simulation = {"load_seconds": 0.1, "itl_ms": {"default": 10.0}, "stream_interval": tokens_per_delta}
    with serving_locally(tmp_path, **simulation) as url:
        done = bench(
            *("run", "--url", url, "--endpoint", endpoint, "--levels", levels, "--metrics-interval", "0"),
            *("--output-tokens", str(output_tokens), "--input-tokens", "8", "--min-requests", "16", "--rounds", "2"),
            *("--level-timeout", "120", "--results-dir", str(tmp_path / "r")),
        )
        streams = sent_streams(emitted(url))
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = stored(tmp_path / "r")
    assert [str(level["concurrency"]) for level in run["levels"]] == levels.split(",")
    for level in run["levels"]:
        lo, hi = level["window"]
        inside = [stream for stream in streams if lo <= stream.sent <= hi]
        sent_rate = sent_decode_rate(streams, level["window"])
        sent_itl_ms = 1000 * statistics.median(gap for stream in inside for gap in inter_token_gaps(stream))
        where = (level["concurrency"], level["decode_tok_s"], level["itl_ms"], sent_rate, sent_itl_ms)
        crowded = level["concurrency"] > 1
        assert level["decode_tok_s"]["p50"] == pytest.approx(sent_rate, rel=0.02 if crowded else 0.01), where
        assert level["itl_ms"]["p50"] == pytest.approx(sent_itl_ms, rel=0.02), where
        assert level["decode_tok_s"]["p50"] == pytest.approx(100.0, rel=0.04 if crowded else 0.03), where
        assert level["itl_ms"]["mean"] == pytest.approx(10.0, rel=0.03), where
        assert level["aggregate_tok_s"] <= 100.0 * level["concurrency"] * 1.01


# Each endpoint once and each chunk size once: the two are read by separate code (the endpoint's parser, then
# the per-token spread of test_chat_deltas_of_several_tokens_give_per_token_itl), so no pair needs its own run.
@pytest.mark.parametrize(("endpoint", "tokens_per_delta"), [("chat", 1), ("generate", 3)])
def test_both_endpoints_hold_the_clock_at_c_1_16_64(tmp_path, endpoint, tokens_per_delta):
    """Per-request decode rate and per-token ITL against a 10 ms clock, whether chunks carry 1 token or 3.

    The client is held to what the server sent: the same definitions (benchmarks/metrics.py) applied to
    the stand-in's own send times (/standin/emitted streams, on the client's CLOCK_MONOTONIC). The server
    keeps its clock on average (absolute deadlines), but on a loaded machine each wake-up lands late, so
    its gaps' median sits up to ~6% above 10 ms at C=1 (CI measured 10.6) while the mean holds, and at
    C=64 (both processes on this 2-core machine) it falls a few percent behind the clock.
    A client reading 16 streams that end together reads their last chunks later than their first (its
    work on the streams that ended comes first): a fixed lag, so its share shrinks as streams lengthen.
    With 60-token streams decode p50 came 1.2-2.9% under the server's at C=16 and C=64 (a fresh CI
    machine; this one, quiet and beside a busy core); with 180 tokens, 0.6-0.9%. So C=1 runs 60-token
    streams held to 1% (0.4% seen), C=16 and C=64 180-token streams held to 2%; the nominal clock to 3% and 4%.
    """
    hold_to_the_clock(tmp_path / "c1", endpoint, tokens_per_delta, "1", 60)
    hold_to_the_clock(tmp_path / "crowded", endpoint, tokens_per_delta, "16,64", 180)


def test_goodput_against_the_stand_ins_clock(tmp_path):
    """10 ms a token after a 20 ms prefill: TPOT <= 12 holds for every request, TTFT <= 5 for none."""
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 10.0}) as url:
        done = bench(
            "run",
            "--url",
            url,
            "--levels",
            "1,4",
            *FAST,
            "--goodput",
            "tpot:12",
            "e2el:5000",
            "--results-dir",
            str(tmp_path / "all"),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        none = bench("run", "--url", url, "--levels", "4", *FAST, "--goodput", "ttft:5", "--results-dir", str(tmp_path / "none"))
        assert none.returncode == 0, none.stdout + none.stderr
    assert "goodput bounds: tpot <= 12 ms, e2el <= 5000 ms" in done.stdout
    (run,) = stored(tmp_path / "all")
    assert run["workload"]["goodput"] == {"tpot": 12.0, "e2el": 5000.0}
    for level in run["levels"]:
        assert level["goodput"]["good_fraction"] == 1.0 and level["goodput"]["good_requests"] == level["completed"]
        assert level["goodput"]["good_tok_s"] == pytest.approx(level["output_tok_s_completed"])
    (run,) = stored(tmp_path / "none")
    assert run["levels"][0]["goodput"]["good_requests"] == 0 and run["levels"][0]["goodput"]["good_tok_s"] == 0.0


def test_repeats_give_each_level_a_95_percent_interval_around_the_clock(tmp_path):
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 10.0}) as url:
        done = bench("run", "--url", url, "--levels", "1", *FAST, "--repeats", "3", "--results-dir", str(tmp_path / "r"))
        assert done.returncode == 0, done.stdout + done.stderr
    assert "repeat 3 of 3" in done.stdout
    (run,) = stored(tmp_path / "r")
    block = run["levels"][0]["repeats"]
    assert block["n"] == 3 and len(block["decode_tok_s_p50"]["values"]) == 3
    low, high = block["decode_tok_s_p50"]["ci95"]
    assert low <= run["levels"][0]["decode_tok_s"]["p50"] <= high
    assert low < 100.0 * 1.02 and high > 100.0 * 0.98  # the clock's 100 tok/s is inside (or at) the interval
    compared = bench("compare", str(tmp_path / "r"))
    assert compared.returncode == 0 and "±" in compared.stdout
