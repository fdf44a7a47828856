"""A benchmark of the load generator itself (`python -m benchmarks harness`), not a test.

A minimal token server (aiohttp, pinned to CPU 0, one token per SSE event on absolute deadlines, so the
true inter-token time is known) is read by two clients pinned to CPU 1: the project's Locust workload
and a minimal asyncio/aiohttp client. For each scenario it reports the client's CPU use, the tokens
it consumed per CPU-second (the most streamed tokens/s one core can take), and how far the measured
inter-token latency and per-request rate drift from the server's clock. Open-loop scenarios (Locust
only) report how late one process sends against its own schedule (actual minus planned send time) at
1,000 and 10,000 requests per second. Ratios, from one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness_tables, locust_command, results, token_server
from benchmarks.metrics import level_metrics
from benchmarks.records import RequestRecord
from benchmarks.workload import Workload

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Scenario:
    name: str
    concurrency: int
    itl_ms: float
    output_tokens: int
    rounds: int = 2
    rate: float = 0.0  # open loop: requests per second from one Locust process (concurrency unused)
    seconds: float = 2.0  # open loop: measured seconds of arrivals


SCENARIOS = (
    Scenario("capacity: 64 streams, 1 ms tokens", 64, 1.0, 256),
    Scenario("field peak: 256 streams, ~1,500 tok/s", 256, 170.0, 24),
    Scenario("heavy: 256 streams, 10 ms tokens", 256, 10.0, 128),
)
# One Locust process against two (--processes 2, as on two load generators) on the same load: what each
# process still reads per CPU-second when the load is split, so what two load-generator machines take.
SPLIT_SCENARIO = Scenario("split: 64 streams, 1 ms tokens", 64, 1.0, 256, rounds=10)
OPEN_LOOP_SCENARIOS = (
    Scenario("open loop: 1,000 requests/s", 0, 1.0, 2, rate=1_000.0),
    Scenario("open loop: 10,000 requests/s", 0, 1.0, 2, rate=10_000.0, seconds=1.0),
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _processes_argv(count: int) -> list[str]:
    """Locust's --processes, on a port of their own (not the default 5557 another run may hold)."""
    port = _free_port()
    return ["--processes", str(count), f"--master-bind-port={port}", f"--master-port={port}"]


def _pin(cpu: int) -> list[int]:
    """Pin to one CPU when the machine has more than one (the server and the client must not share)."""
    cpus = sorted(os.sched_getaffinity(0))
    return [cpus[cpu % len(cpus)]]


def _run_measured(argv: list[str], cpu: list[int], timeout: float) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit status) of a child pinned to `cpu`."""
    started = time.monotonic()
    child = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=lambda: os.sched_setaffinity(0, cpu)
    )
    deadline = started + timeout
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            child.kill()
            pid, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    return time.monotonic() - started, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def _read(path: Path) -> list[RequestRecord]:
    out = []
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if item.pop("type", "request") == "request":
            out.append(RequestRecord.from_dict(item))
    return out


def _locust_argv(url: str, records: Path, output_tokens: int, run_time_s: int, **level: Any) -> list[str]:
    """Headless Locust on the project's workload (8-token prompts, no /metrics sampling), with one level's options
    built as the benchmark playbook builds them (benchmarks/locust_command.py)."""
    return [
        *(sys.executable, "-m", "locust", "-f", str(REPO / "benchmarks" / "locustfile.py")),
        *locust_command.level_options(host=url, records=records, run_time_s=run_time_s, loglevel="ERROR", **level),
        *Workload(levels=[1], input_tokens=8, output_tokens=output_tokens, metrics_interval=0.0).locust_options(),
    ]


def measure(scenario: Scenario, client: str, work: Path, timeout: float) -> dict[str, Any]:
    """One client (locust, locust xN for N Locust processes, or asyncio) reading one scenario from the token server."""
    # One file per scenario and client: Locust appends, so a file met twice would mix two measurements.
    records = work / (re.sub(r"[^a-z0-9]+", "-", f"{scenario.name} {client}".lower()).strip("-") + ".jsonl")
    with _token_server(scenario.itl_ms) as url:
        wall, cpu, status = _run_measured(_client_argv(scenario, client, url, records, timeout), _pin(1), timeout)
    read = _read(records) if records.exists() else []
    figures = {"scenario": scenario.name, "client": client, "status": status, "wall_s": wall}
    figures["client_cpu_pct"] = 100 * cpu / wall if wall else None
    if scenario.rate:
        asked = {"target_rate": scenario.rate, "burstiness": 1.0, "max_concurrency": 0}
        return {**figures, **_open_loop_figures(scenario, level_metrics(read, None, None, asked) if read else {})}
    level = level_metrics(read, scenario.concurrency, None, None) if read else {}
    tokens_consumed = sum(r.streamed_tokens for r in read)
    return {
        **figures,
        "cpu_s": cpu,
        "tokens": tokens_consumed,
        "tok_per_cpu_s": tokens_consumed / cpu if cpu else None,
        "aggregate_tok_s": level.get("aggregate_tok_s"),
        "true_itl_ms": scenario.itl_ms,
        "itl_p50_ms": (level.get("itl_ms") or {}).get("p50"),
        "itl_p99_ms": (level.get("itl_ms") or {}).get("p99"),
        "decode_p50": (level.get("decode_tok_s") or {}).get("p50"),
        "true_decode": 1000 / scenario.itl_ms,
    }


@contextlib.contextmanager
def _token_server(itl_ms: float) -> Iterator[str]:
    """The token server on a CPU of its own, up (its /health answers): its URL."""
    port, server_cpu = _free_port(), _pin(0)
    serve_argv = [sys.executable, "-m", "benchmarks", "harness", "serve", "--port", str(port), "--itl-ms", str(itl_ms)]
    server = subprocess.Popen(serve_argv, cwd=REPO, preexec_fn=lambda: os.sched_setaffinity(0, server_cpu))
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _client_argv(scenario: Scenario, client: str, url: str, records: Path, timeout: float) -> list[str]:
    requests = scenario.rounds * scenario.concurrency
    if scenario.rate:
        # Well inside the timeout: a process that falls behind its schedule still stops and writes its records.
        rate = {"users": 1, "request_rate": scenario.rate, "warmup": int(scenario.rate * 0.2)}
        return _locust_argv(
            url, records, scenario.output_tokens, int(timeout / 4), **rate, requests=int(scenario.rate * scenario.seconds)
        )
    if client.startswith("locust"):
        processes = _processes_argv(int(client.removeprefix("locust x"))) if client.startswith("locust x") else []
        level = {"users": scenario.concurrency, "requests": requests}
        return [*_locust_argv(url, records, scenario.output_tokens, int(timeout), **level), *processes]
    asyncio_client = (sys.executable, "-m", "benchmarks.asyncio_client", "--url", url, "--records", str(records))
    return [
        *asyncio_client,
        *("--concurrency", str(scenario.concurrency), "--requests", str(requests)),
        "--output-tokens",
        str(scenario.output_tokens),
    ]


def _open_loop_figures(scenario: Scenario, level: dict[str, Any]) -> dict[str, Any]:
    arrival = level.get("arrival") or {}
    lateness = arrival.get("lateness_ms") or {}
    return {
        "target_rate": scenario.rate,
        "planned_rate": arrival.get("planned_rate"),
        "achieved_rate": arrival.get("achieved_rate"),
        "lateness_p50_ms": lateness.get("p50"),
        "lateness_p99_ms": lateness.get("p99"),
        "requests": level.get("requests", 0),
        "failed": level.get("failed", 0),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `harness` subcommand's options (python -m benchmarks harness)."""
    sub = parser.add_subparsers(dest="harness_command")
    server = sub.add_parser("serve", help="(internal) run the token server")
    server.add_argument("--port", type=int, required=True)
    server.add_argument("--itl-ms", type=float, required=True)
    parser.add_argument("--timeout", type=float, default=180, help="seconds a client may take per scenario")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results")


def command_harness(args: argparse.Namespace) -> int:
    if args.harness_command == "serve":
        token_server.serve(args.port, args.itl_ms)
        return 0
    print(f"CPUs: {sorted(os.sched_getaffinity(0))} (server pinned to the first, clients to the second)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in SCENARIOS:
            for client in ("locust", "asyncio"):
                print(f"  {scenario.name}: {client} ...", flush=True)
                rows.append(measure(scenario, client, Path(tmp), args.timeout))
        for client in ("locust", "locust x2"):
            print(f"  {SPLIT_SCENARIO.name}: {client} ...", flush=True)
            rows.append(measure(SPLIT_SCENARIO, client, Path(tmp), args.timeout))
        open_rows = []
        for scenario in OPEN_LOOP_SCENARIOS:
            print(f"  {scenario.name}: locust ...", flush=True)
            open_rows.append(measure(scenario, "locust", Path(tmp), args.timeout))
    print(harness_tables.table(rows))
    print(harness_tables.open_loop_table(open_rows))
    capacity = {row["client"]: row["tok_per_cpu_s"] for row in rows if row["scenario"] == SCENARIOS[0].name}
    if capacity.get("locust") and capacity.get("asyncio"):
        print(f"Locust / asyncio tokens per CPU-second: {capacity['locust'] / capacity['asyncio']:.2f}")
    split = {row["client"]: row for row in rows if row["scenario"] == SPLIT_SCENARIO.name}
    one, two = split.get("locust", {}), split.get("locust x2", {})
    if one.get("tok_per_cpu_s") and two.get("tok_per_cpu_s") and one.get("aggregate_tok_s") and two.get("aggregate_tok_s"):
        ratio = two["tok_per_cpu_s"] / one["tok_per_cpu_s"]
        print(
            f"Two Locust processes / one, tokens per CPU-second: {ratio:.2f}, so two load-generator machines (a core each)"
            f" take ~{2 * ratio:.2f}x one's load; their aggregate tok/s / one's on the same load:"
            f" {two['aggregate_tok_s'] / one['aggregate_tok_s']:.3f}"
        )
    record = {"kind": "sglang-harness-benchmark", "cpus": sorted(os.sched_getaffinity(0)), "rows": rows, "open_loop": open_rows}
    path = results.save_record(record, args.results_dir, "harness", "loadgen")
    print(f"saved {path}")
    return 0
