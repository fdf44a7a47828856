"""The benchmark's arithmetic on synthetic requests whose true figures are known by construction."""

import argparse
import json

import pytest

from benchmarks.levels import loadgen_usage
from benchmarks.metrics import decode_rate, inter_token_gaps, level_metrics, stats
from benchmarks.records import RequestRecord
from benchmarks.report import level_table
from benchmarks.workload import Workload, parse_goodput


def steady(
    level: int, sent: float, tokens: int = 101, ttft: float = 0.2, itl: float = 0.01, phase: str = "measured", chunk: int = 1
) -> RequestRecord:
    """A request that streams `tokens` tokens, `chunk` per chunk, one token every `itl` seconds after its first."""
    first = sent + ttft
    times, counts = [first], [1]
    produced = 1
    while produced < tokens:
        k = min(chunk, tokens - produced)
        produced += k
        times.append(first + (produced - 1) * itl)
        counts.append(k)
    return RequestRecord(
        level=level,
        phase=phase,
        sent=sent,
        end=times[-1] + 0.001,
        ok=True,
        requested_tokens=tokens,
        output_tokens=tokens,
        input_tokens=64,
        chunk_times=times,
        chunk_tokens=counts,
    )


def closed_loop(concurrency: int, rounds: int, warmup_rounds: int = 1, cooldown_rounds: int = 1) -> list[RequestRecord]:
    """C users back to back: each request 0.2 s to first token + 100 x 10 ms = 1.2 s; phases by round."""
    records = []
    for user in range(concurrency):
        t = user * 1.201 / concurrency  # at steady state the users' cycles are spread evenly
        for round_ in range(warmup_rounds + rounds + cooldown_rounds):
            phase = "warmup" if round_ < warmup_rounds else "measured" if round_ < warmup_rounds + rounds else "cooldown"
            record = steady(concurrency, t, phase=phase)
            records.append(record)
            t = record.end
    return records


def test_one_request_decodes_at_its_true_rate():
    record = steady(1, 0.0, tokens=101, itl=0.01)
    assert decode_rate(record) == pytest.approx(100.0)
    assert inter_token_gaps(record) == pytest.approx([0.01] * 100)


def test_a_chunk_of_k_tokens_counts_as_k_equal_gaps():
    record = steady(1, 0.0, tokens=101, itl=0.01, chunk=4)
    gaps = inter_token_gaps(record)
    assert len(gaps) == 100 and sum(gaps) == pytest.approx(1.0)
    assert stats(gaps)["p50"] == pytest.approx(0.01)  # per chunk it would read 40 ms
    assert decode_rate(record) == pytest.approx(100.0)


@pytest.mark.parametrize("concurrency", [1, 16, 64])
def test_closed_loop_aggregate_is_concurrency_times_the_per_request_rate(concurrency):
    records = closed_loop(concurrency, rounds=5)
    level = level_metrics(records, concurrency)
    assert level["completed"] == 5 * concurrency and level["failed"] == 0
    # Each user emits 101 tokens per 1.201 s cycle.
    assert level["aggregate_tok_s"] == pytest.approx(concurrency * 101 / 1.201, rel=0.01)
    assert level["decode_tok_s"]["p50"] == pytest.approx(100.0)
    assert level["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert level["itl_ms"]["p99"] == pytest.approx(10.0)
    assert level["tpot_ms"]["mean"] == pytest.approx(10.0 + 1 / 100, rel=1e-3)
    assert level["achieved_concurrency"] == pytest.approx(concurrency, rel=0.01)
    assert level["bench_serving"]["median_itl_ms"] == pytest.approx(10.0)


def test_warmup_and_cooldown_requests_are_not_measured_but_their_tokens_in_the_window_count():
    records = closed_loop(4, rounds=3)
    level = level_metrics(records, 4)
    assert level["requests"] == 12 and level["output_tokens"] == 12 * 101


def test_failures_are_counted_and_named():
    records = closed_loop(2, rounds=2)
    broken = next(r for r in records if r.phase == "measured")
    broken.ok, broken.error = False, "HTTP 500"
    level = level_metrics(records, 2)
    assert (level["completed"], level["failed"], level["errors"]) == (3, 1, ["HTTP 500"])


def test_a_server_that_sends_fewer_tokens_than_asked_is_reported():
    record = steady(1, 0.0, tokens=50)
    record.requested_tokens = 100
    assert level_metrics([record], 1)["length_mismatches"] == 1


def test_the_servers_count_wins_over_the_streamed_count():
    record = steady(1, 0.0, tokens=101)
    record.output_tokens = 202  # e.g. two tokens per chat delta
    level = level_metrics([record], 1)
    assert level["stream_count_mismatches"] == 1 and level["output_tokens"] == 202
    assert level["aggregate_tok_s"] == pytest.approx(202 / (record.end - record.sent), rel=1e-3)


def test_a_level_where_everything_failed_reports_zero_not_an_error():
    record = RequestRecord(level=1, phase="measured", sent=0.0, end=1.0, ok=False, error="connection refused")
    level = level_metrics([record], 1)
    assert level["completed"] == 0 and level["aggregate_tok_s"] == 0.0 and level["errors"] == ["connection refused"]


def test_a_first_chunk_of_several_tokens_opens_the_decode_span():
    # 30 tokens in chunks of 3 every 30 ms (10 ms per token): the first chunk's 3 tokens arrive at once.
    times = [0.1 + 0.03 * i for i in range(10)]
    record = RequestRecord(
        level=1,
        phase="measured",
        sent=0.0,
        end=times[-1],
        ok=True,
        requested_tokens=30,
        output_tokens=30,
        chunk_times=times,
        chunk_tokens=[3] * 10,
    )
    assert decode_rate(record) == pytest.approx(100.0)  # (30 - 3) / 0.27 s; (30 - 1) / 0.27 s would read 107
    assert stats(inter_token_gaps(record))["p50"] == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("bounds", "good"),
    [
        ({"tpot": 10.5}, True),
        ({"tpot": 9.0}, False),
        ({"ttft": 150.0}, False),
        ({"ttft": 250.0, "e2el": 1300.0}, True),
        ({"ttft": 250.0, "e2el": 1100.0}, False),
    ],
)
def test_goodput_counts_the_requests_within_every_bound(bounds, good):
    """Each request: TTFT 200 ms, TPOT (1.001 s after the first token) / 100 = 10.01 ms, E2E 1,201 ms."""
    records = closed_loop(4, rounds=5)
    level = level_metrics(records, 4, bounds)
    figures = level["goodput"]
    assert figures["bounds_ms"] == bounds
    assert figures["good_requests"] == (20 if good else 0)
    assert figures["good_fraction"] == (1.0 if good else 0.0)
    assert figures["good_tok_s"] == pytest.approx(level["output_tok_s_completed"] if good else 0.0)
    assert figures["good_request_rate"] == pytest.approx(level["request_rate"] if good else 0.0)


def test_failed_requests_are_never_good_and_no_bounds_means_no_goodput():
    records = closed_loop(2, rounds=3)
    for record in records[:3]:
        record.ok = False
    assert "goodput" not in level_metrics(records, 2)
    assert level_metrics(records, 2, {"e2el": 10_000.0})["goodput"]["good_requests"] < 6


@pytest.mark.parametrize("text", ["tpot", "tpot:", "latency:5", "tpot:-1", "tpot:abc", "ttft=5"])
def test_bad_goodput_bounds_are_refused_with_an_example(text):
    with pytest.raises(argparse.ArgumentTypeError, match="--goodput ttft:2000 tpot:50"):
        parse_goodput(text)


def test_goodput_bounds_reach_the_workload_as_one_dict():
    parser = argparse.ArgumentParser()
    Workload.add_cli_args(parser)
    workload = Workload.from_cli_args(parser.parse_args(["--goodput", "ttft:2000", "tpot:50", "--goodput", "tpot:40"]))
    assert workload.goodput == {"ttft": 2000.0, "tpot": 40.0}
    assert Workload.from_cli_args(parser.parse_args([])).goodput == {}


def test_a_load_generator_busier_than_70_percent_of_a_core_flags_the_level(tmp_path):
    path = tmp_path / "level.jsonl"
    lines = [
        {"type": "loadgen", "cpu_s": 3.0, "wall_s": 10.0, "requests": 5},
        {"type": "loadgen", "cpu_s": 8.0, "wall_s": 10.0, "requests": 5},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert loadgen_usage(path) == {"processes": 2, "busiest_cpu_fraction": 0.8, "client_bound": True}
    path.write_text(json.dumps(lines[0]) + "\n")
    assert loadgen_usage(path)["client_bound"] is False
    path.write_text("")
    assert loadgen_usage(path) is None
    text = level_table([{**level_metrics(closed_loop(2, rounds=2), 2), "status": "ok", "loadgen": loadgen_usage_of(0.9)}])
    assert "90!" in text and "C=2: client-bound: a load-generator process used 90% of a core" in text


def loadgen_usage_of(fraction):
    return {"processes": 1, "busiest_cpu_fraction": fraction, "client_bound": fraction > 0.7}
