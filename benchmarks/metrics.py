"""From per-request records to a level's figures. Pure functions; definitions in docs/benchmarks.md.

Times are seconds in; reported latencies are milliseconds, rates tokens per second.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from benchmarks.records import RequestRecord

PERCENTILES = (50, 90, 99)


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """mean, p50, p90, p99 (numpy's linear interpolation); None for an empty list."""
    if not values:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    array = np.asarray(values, dtype=float)
    return {"mean": float(array.mean()), **{f"p{q}": float(np.percentile(array, q)) for q in PERCENTILES}}


def output_tokens(record: RequestRecord) -> int:
    """The server's count when it gave one, else what the client streamed."""
    return record.output_tokens if record.output_tokens is not None else record.streamed_tokens


def token_arrivals(record: RequestRecord) -> list[tuple[float, float]]:
    """(time, tokens) per chunk, scaled so that a request's chunks add up to the server's own count."""
    streamed = record.streamed_tokens
    scale = output_tokens(record) / streamed if streamed and record.output_tokens is not None else 1.0
    return [(t, k * scale) for t, k in zip(record.chunk_times, record.chunk_tokens, strict=True)]


def decode_rate(record: RequestRecord) -> float | None:
    """(tokens after the first chunk) / (last chunk time - first chunk time): one request's decode speed.

    With one token per chunk that is (tokens - 1) / span; a first chunk of k tokens arrived all at once,
    so its k tokens open the span instead of counting inside it.
    """
    tokens = output_tokens(record)
    first = record.chunk_tokens[0] if record.chunk_tokens else 1
    if tokens - first < 1 or len(record.chunk_times) < 2:
        return None
    span = record.chunk_times[-1] - record.chunk_times[0]
    return (tokens - first) / span if span > 0 else None


def inter_token_gaps(record: RequestRecord) -> list[float]:
    """Per token: a chunk of k tokens after a gap g counts as k gaps of g / k (the first chunk opens no gap)."""
    gaps: list[float] = []
    for i in range(1, len(record.chunk_times)):
        k = max(record.chunk_tokens[i], 1)
        gaps.extend([(record.chunk_times[i] - record.chunk_times[i - 1]) / k] * k)
    return gaps


def window(records: Iterable[RequestRecord]) -> tuple[float, float] | None:
    """The measured window: the first measured request's send to the last measured request's end."""
    measured = [r for r in records if r.phase == "measured"]
    if not measured:
        return None
    return min(r.sent for r in measured), max(r.end for r in measured)


def _overlap(start: float, end: float, lo: float, hi: float) -> float:
    return max(0.0, min(end, hi) - max(start, lo))


GOODPUT_METRICS = ("ttft", "tpot", "e2el")  # vLLM's names for --goodput bounds, in milliseconds


def request_latencies(record: RequestRecord) -> dict[str, float | None]:
    """One request's TTFT, TPOT (time per output token after the first) and end-to-end latency, in ms."""
    ttft = (record.first_token - record.sent) * 1000 if record.first_token is not None else None
    tokens = output_tokens(record)
    tpot = (record.end - record.first_token) * 1000 / (tokens - 1) if record.first_token is not None and tokens > 1 else None
    return {"ttft": ttft, "tpot": tpot, "e2el": (record.end - record.sent) * 1000}


def is_good(record: RequestRecord, bounds: dict[str, float]) -> bool:
    """Completed and within every bound (a bound on a figure the request does not have is not met)."""
    if not record.ok:
        return False
    latencies = request_latencies(record)
    return all(latencies[name] is not None and latencies[name] <= limit for name, limit in bounds.items())


def goodput(records: Sequence[RequestRecord], bounds: dict[str, float], span: tuple[float, float]) -> dict[str, Any]:
    """Of the measured requests: how many met every bound, per second and as output tokens per second."""
    measured = [r for r in records if r.phase == "measured"]
    good = [r for r in measured if is_good(r, bounds)]
    duration = span[1] - span[0]
    return {
        "bounds_ms": dict(bounds),
        "good_requests": len(good),
        "good_fraction": len(good) / len(measured) if measured else 0.0,
        "good_request_rate": len(good) / duration if duration > 0 else 0.0,
        "good_tok_s": sum(output_tokens(r) for r in good) / duration if duration > 0 else 0.0,
    }


BEHIND_SCHEDULE = 0.03  # an open-loop client sending this much slower than its schedule has fallen behind
LATE_MS = 50.0  # ... or sending its typical request this late


def _rate_and_cv(times: Sequence[float]) -> tuple[float | None, float | None]:
    """Arrivals per second over the span of `times`, and the coefficient of variation of the gaps."""
    gaps = np.diff(np.sort(np.asarray(times, dtype=float)))
    if len(gaps) < 2 or gaps.sum() <= 0:
        return None, None
    return float(len(gaps) / gaps.sum()), float(gaps.std() / gaps.mean())


def arrival_figures(records: Sequence[RequestRecord], asked: dict[str, Any]) -> dict[str, Any]:
    """Open loop, over the measured requests: the schedule's rate and CV, what the client really sent, and
    how late it sent (actual minus planned send time: the generator's own error, plus any wait for a slot)."""
    measured = [r for r in records if r.phase == "measured" and r.planned is not None]
    planned_rate, planned_cv = _rate_and_cv([r.planned for r in measured if r.planned is not None])
    achieved_rate, achieved_cv = _rate_and_cv([r.sent for r in measured])
    lateness = stats([(r.sent - r.planned) * 1000 for r in measured if r.planned is not None])
    # Without a cap, sending slower than planned or typically late means the load generator, not the
    # server, set the pace (a cap's waits are lateness by design).
    behind = not asked.get("max_concurrency") and (
        (achieved_rate is not None and planned_rate is not None and achieved_rate < (1 - BEHIND_SCHEDULE) * planned_rate)
        or (lateness["p50"] is not None and lateness["p50"] > LATE_MS)
    )
    return {
        **asked,
        "planned_rate": planned_rate,
        "planned_cv": planned_cv,
        "achieved_rate": achieved_rate,
        "achieved_cv": achieved_cv,
        "lateness_ms": lateness,
        "behind_schedule": bool(behind),
    }


def level_metrics(
    records: Sequence[RequestRecord],
    concurrency: int | None,
    goodput_bounds: dict[str, float] | None = None,
    arrival: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every figure of one level, plus the same under SGLang bench_serving's key names.

    `concurrency` is the closed loop's C; an open-loop level has None and `arrival` (what it asked for).
    """
    measured = [r for r in records if r.phase == "measured"]
    completed = [r for r in measured if r.ok]
    span = window(records)
    result: dict[str, Any] = {
        "concurrency": concurrency,
        "requests": len(measured),
        "completed": len(completed),
        "failed": len(measured) - len(completed),
        "errors": sorted({r.error for r in measured if r.error})[:5],
    }
    if arrival is not None:
        result["arrival"] = arrival_figures(records, arrival)
    if span is None or span[1] <= span[0] or not completed:
        return {**result, "duration_s": 0.0, "aggregate_tok_s": 0.0}
    lo, hi = span
    duration = hi - lo
    # Every token that arrived inside the window counts, whichever request carried it: at steady
    # concurrency that is the server's output rate, free of the ramp-up and drain at either end.
    in_window = sum(k for r in records for t, k in token_arrivals(r) if lo <= t <= hi)
    tokens_completed = sum(output_tokens(r) for r in completed)
    ttft = [(r.first_token - r.sent) * 1000 for r in completed if r.first_token is not None]
    e2e = [(r.end - r.sent) * 1000 for r in completed]
    itl = [gap * 1000 for r in completed for gap in inter_token_gaps(r)]
    tpot = [value for r in completed if (value := request_latencies(r)["tpot"]) is not None]
    rates = [rate for r in completed if (rate := decode_rate(r)) is not None]
    achieved = sum(_overlap(r.sent, r.end or hi, lo, hi) for r in records) / duration
    result.update(
        window=[lo, hi],
        duration_s=duration,
        aggregate_tok_s=in_window / duration,
        output_tok_s_completed=tokens_completed / duration,
        request_rate=len(completed) / duration,
        achieved_concurrency=achieved,
        decode_tok_s=stats(rates),
        ttft_ms=stats(ttft),
        itl_ms=stats(itl),
        tpot_ms=stats(tpot),
        e2e_ms=stats(e2e),
        output_tokens=tokens_completed,
        output_len=stats([output_tokens(r) for r in completed]),
        input_tokens=sum(r.input_tokens or 0 for r in completed),
        length_mismatches=sum(1 for r in completed if output_tokens(r) != r.requested_tokens),
        stream_count_mismatches=sum(1 for r in completed if r.output_tokens not in (None, r.streamed_tokens)),
        # How each request's tokens per chunk were known; "spread" means ITL is an even share, not exact.
        count_sources=dict(Counter(r.count_source or "unknown" for r in completed)),
    )
    if goodput_bounds:
        result["goodput"] = goodput(records, goodput_bounds, span)
    result["bench_serving"] = bench_serving_keys(result)
    return result


def bench_serving_keys(level: dict[str, Any]) -> dict[str, Any]:
    """The level under the names SGLang's bench_serving prints, for side-by-side comparison."""
    return {
        "completed": level["completed"],
        "duration": level["duration_s"],
        "total_input_tokens": level["input_tokens"],
        "total_output_tokens": level["output_tokens"],
        "request_throughput": level["request_rate"],
        "output_throughput": level["output_tok_s_completed"],
        "concurrency": level["achieved_concurrency"],
        "mean_ttft_ms": level["ttft_ms"]["mean"],
        "median_ttft_ms": level["ttft_ms"]["p50"],
        "p99_ttft_ms": level["ttft_ms"]["p99"],
        "mean_tpot_ms": level["tpot_ms"]["mean"],
        "median_tpot_ms": level["tpot_ms"]["p50"],
        "p99_tpot_ms": level["tpot_ms"]["p99"],
        "mean_itl_ms": level["itl_ms"]["mean"],
        "median_itl_ms": level["itl_ms"]["p50"],
        "p99_itl_ms": level["itl_ms"]["p99"],
        "mean_e2e_latency_ms": level["e2e_ms"]["mean"],
        "median_e2e_latency_ms": level["e2e_ms"]["p50"],
    }
