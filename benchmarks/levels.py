"""One level's records as Locust wrote them, summarised into its figures and status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.clocks import on_one_clock
from benchmarks.metrics import level_metrics, window
from benchmarks.records import RequestRecord

# A load-generator process busier than this share of one core is the bottleneck, not the server.
CLIENT_BOUND_CPU = 0.7


def level_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a level's records: one file, or a directory of one file per load-generator host (on one clock)."""
    if path.is_dir():
        return on_one_clock([_lines(part) for part in sorted(path.glob("*.jsonl"))])
    return _lines(path)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


STALLED = "stalled:"  # the locustfile's error for the requests open when it named a hang (watch_for_a_hang)


def read_level(path: Path) -> tuple[list[RequestRecord], list[dict[str, float]]]:
    """The level's requests and the server's /metrics samples."""
    requests, samples = [], []
    for line in level_lines(path):
        item = dict(line)
        kind = item.pop("type", "request")
        if kind == "request":
            requests.append(RequestRecord.from_dict(item))
        elif kind == "metrics":
            samples.append(item)
    return requests, samples


def loadgen_usage(path: Path) -> dict[str, Any] | None:
    """How busy each load-generator process was (CPU seconds over wall seconds), and whether one was the bottleneck."""
    processes = [item for item in level_lines(path) if item.get("type") == "loadgen"]
    if not processes:
        return None
    busiest = max(p["cpu_s"] / p["wall_s"] if p["wall_s"] > 0 else 0.0 for p in processes)
    usage = {"processes": len(processes), "busiest_cpu_fraction": busiest, "client_bound": busiest > CLIENT_BOUND_CPU}
    hosts = sorted({p["host"] for p in processes if p.get("host")})
    return {**usage, "hosts": hosts} if len(hosts) > 1 else usage


def server_samples(samples: list[dict[str, float]], window: tuple[float, float] | None) -> dict[str, float | None]:
    """The server's own figures over the measured window: throughput, running and queued requests (means and
    the most running), KV token usage (mean and peak) and the requests it retracted (the counter's rise)."""
    inside = [s for s in samples if window and window[0] <= s["time"] <= window[1]]

    def values(key: str) -> list[float]:
        return [s[key] for s in inside if key in s]

    def mean(key: str) -> float | None:
        found = values(key)
        return sum(found) / len(found) if found else None

    retracted = values("sglang:num_retracted_requests_total")
    return {
        "gen_throughput": mean("sglang:gen_throughput"),
        "num_running_reqs": mean("sglang:num_running_reqs"),
        "max_running_reqs": max(values("sglang:num_running_reqs"), default=None),
        "num_queue_reqs": mean("sglang:num_queue_reqs"),
        "token_usage": mean("sglang:token_usage"),
        "max_token_usage": max(values("sglang:token_usage"), default=None),
        "retracted": max(retracted) - min(retracted) if retracted else None,
        "samples": len(inside),
    }


def summarize_level(
    concurrency: int | None,
    path: Path,
    run: dict[str, Any] | None,
    requested: int,
    goodput: dict[str, float] | None = None,
    arrival: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A closed-loop level (its concurrency) or an open-loop one (concurrency None, `arrival` what it asked for)."""
    if not path.exists():
        reason = (run or {}).get("stderr", "").strip().splitlines()[-1:] or ["no records came back"]
        failed = {"concurrency": concurrency, "status": "failed", "error": reason[0][:300], "completed": 0, "failed": 0}
        return {**failed, "arrival": arrival} if arrival else failed
    records, samples = read_level(path)
    figures = level_metrics(records, concurrency, goodput, arrival)
    figures["server_metrics"] = server_samples(samples, window(records))
    figures["loadgen"] = loadgen_usage(path)
    stalled = next((r.error for r in records if r.error.startswith(STALLED)), "")
    if stalled:
        status = "hung"  # the server stopped producing tokens with requests open: a verdict, not a failure to measure
    elif figures["completed"] == 0:
        status = "failed"
    elif figures["completed"] < requested or figures["failed"]:
        status = "partial"
    else:
        status = "ok"
    figures["status"] = status
    if status == "failed":
        figures["error"] = (figures.get("errors") or ["no request completed"])[0]
    if status == "hung":
        figures["error"] = stalled
    return figures
