"""The workload: streaming generation requests in a closed loop at fixed concurrency (Locust, headless).

    locust -f benchmarks/locustfile.py --headless -u C -r C --run-time 600 --host URL \
        --bench-output-tokens 256 --bench-requests 64 --bench-records out.jsonl

C users, no think time: each sends a request, reads its stream to the end, sends the next. The first
`--bench-warmup` requests (default C) are excluded; the next `--bench-requests` are measured; requests
sent after those keep the concurrency steady until the last measured one ends, then the run stops.
Every request's chunk arrival times and token counts (the server's own, from usage / meta_info) are
written to `--bench-records` as JSON lines, with samples of the server's /metrics; the figures are
computed afterwards by benchmarks.metrics. Locust's own response times stop at the headers for
streamed responses, so the real TTFT and end-to-end times are reported here through request events.
"""

from __future__ import annotations

import fcntl
import json
import random
import re
import time
from array import array
from typing import Any

import gevent
from locust import FastHttpUser, constant, events, task
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

# Words that tokenizers keep whole: one word ~ one token, so a prompt of N words is ~N tokens.
# The server's own prompt_tokens count is recorded, so the real input length is known either way.
WORDS = (
    "the",
    "time",
    "of",
    "day",
    "and",
    "year",
    "for",
    "work",
    "in",
    "life",
    "world",
    "over",
    "when",
    "people",
    "make",
    "good",
    "use",
    "what",
    "they",
    "know",
    "about",
    "each",
    "part",
    "this",
    "small",
    "place",
    "where",
    "we",
)
METRIC_LINE = re.compile(r"^(sglang:gen_throughput|sglang:num_running_reqs)(?:\{[^}]*\})?\s+([0-9.eE+-]+)$", re.MULTILINE)


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    group = parser.add_argument_group("benchmark")
    group.add_argument(
        "--bench-endpoint",
        choices=["chat", "generate"],
        default="chat",
        help="OpenAI /v1/chat/completions (default) or SGLang's native /generate",
    )
    group.add_argument("--bench-model", default="default", help="model name for the OpenAI endpoint")
    group.add_argument("--bench-input-tokens", type=int, default=128)
    group.add_argument("--bench-output-tokens", type=int, default=256)
    group.add_argument(
        "--bench-range-ratio",
        type=float,
        default=1.0,
        help="lengths uniform in [target x ratio, target] per request (bench_serving's --random-range-ratio; 1: fixed)",
    )
    group.add_argument("--bench-seed", type=int, default=0)
    group.add_argument(
        "--bench-vocab-size",
        type=int,
        default=32000,
        help="/generate only: token ids are drawn below this (ids past the vocabulary crash SGLang)",
    )
    group.add_argument("--bench-warmup", type=int, default=-1, help="requests excluded first (default: one per user)")
    group.add_argument("--bench-requests", type=int, default=32, help="measured requests")
    group.add_argument("--bench-records", default="records.jsonl", help="where the per-request records go")
    group.add_argument("--bench-api-key", default="", env_var="BENCH_API_KEY", help="bearer token when the server has --api-key")
    group.add_argument("--bench-api-key-file", default="", help="read the bearer token from this file (kept off command lines)")
    group.add_argument("--bench-metrics-interval", type=float, default=1.0, help="seconds between /metrics samples; 0: off")


class Level:
    """The level's closed-loop bookkeeping, shared by the users of this process."""

    def __init__(self) -> None:
        self.sent = 0
        self.measured_done = 0
        self.records: list[dict[str, Any]] = []
        self.in_flight: dict[int, dict[str, Any]] = {}
        self.samples: list[dict[str, float]] = []
        self.stopping = False
        self.written = False
        self.workers_done = 0  # on the master of --processes N: workers whose measured share is done
        # This process's CPU and wall clocks at its first request: how busy the load generator itself was.
        self.cpu_start: float | None = None
        self.wall_start = 0.0

    def phase(self, index: int, warmup: int, measured: int) -> str:
        # benchmarks.records.phase_of's rule: this file runs alone on the load generator, without the package.
        return "warmup" if index < warmup else "measured" if index < warmup + measured else "cooldown"


LEVEL = Level()


def share(total: int, parts: int, index: int) -> int:
    """This process's part of a level-wide count, when Locust runs --processes N workers."""
    return total // parts + (1 if index < total % parts else 0)


def process_slot(environment: Environment) -> tuple[int, int]:
    """(processes, this worker's index): (1, 0) for a plain single-process run."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        processes = max(int(getattr(environment.parsed_options, "processes", 1) or 1), 1)
        return processes, runner.worker_index % processes
    return 1, 0


def prompt_words(seed: int, index: int, count: int) -> str:
    chooser = random.Random(seed * 1_000_003 + index)
    return " ".join(chooser.choice(WORDS) for _ in range(count))


def prompt_ids(seed: int, index: int, count: int, vocab_size: int) -> list[int]:
    """Token ids inside the vocabulary, clear of the few special ids at its start."""
    chooser = random.Random(seed * 1_000_003 + index)
    low = min(16, vocab_size // 2)
    return [chooser.randrange(low, vocab_size) for _ in range(count)]


def lengths(options: Any, index: int) -> tuple[int, int]:
    """(input, output) tokens of the index-th request: the targets, or uniform in [target x ratio, target]."""
    ratio = options.bench_range_ratio
    if ratio >= 1:
        return options.bench_input_tokens, options.bench_output_tokens
    chooser = random.Random(options.bench_seed * 1_000_003 + index + 500_009)  # apart from the prompt's own draw

    def draw(target: int) -> int:
        return chooser.randint(max(1, int(target * ratio)), target)

    return draw(options.bench_input_tokens), draw(options.bench_output_tokens)


def request_body(options: Any, index: int) -> tuple[str, bytes, int]:
    """The request's path, body and the output tokens it asks for."""
    seed = options.bench_seed
    n_in, n_out = lengths(options, index)
    if options.bench_endpoint == "generate":
        body = {
            "input_ids": prompt_ids(seed, index, n_in, options.bench_vocab_size),
            "stream": True,
            "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True, "temperature": 0},
        }
        return "/generate", json.dumps(body).encode(), n_out
    body = {
        "model": options.bench_model,
        "messages": [{"role": "user", "content": prompt_words(seed, index, n_in)}],
        "max_tokens": n_out,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    return "/v1/chat/completions", json.dumps(body).encode(), n_out


def read_stream(raw: Any, record: dict[str, Any], endpoint: str) -> None:
    """Read SSE lines to the end of the body (so the connection returns to the pool), timing each chunk."""
    times: array = record["chunk_times"]
    counts: array = record["chunk_tokens"]
    cumulative = 0
    while True:
        line = raw.readline(b"\n")
        if not line:
            break
        if not line.startswith(b"data: {"):
            continue
        now = time.monotonic()
        event = json.loads(line[6:])
        if endpoint == "generate":
            meta = event.get("meta_info") or {}
            total = int(meta.get("completion_tokens", cumulative))
            if total > cumulative:
                times.append(now)
                counts.append(total - cumulative)
                cumulative = total
            record["output_tokens"] = cumulative
            record["input_tokens"] = meta.get("prompt_tokens", record["input_tokens"])
        else:
            choices = event.get("choices") or []
            delta = (choices[0].get("delta") or {}) if choices else {}
            usage = event.get("usage") or {}
            so_far = usage.get("completion_tokens")
            if delta.get("content") or delta.get("reasoning_content"):
                times.append(now)
                if choices and isinstance(so_far, int):
                    # continuous_usage_stats: the cumulative count on this very chunk gives its exact size
                    counts.append(max(so_far - cumulative, 1))
                    cumulative = max(so_far, cumulative + 1)
                    record["count_source"] = record["count_source"] or "continuous_usage"
                else:
                    counts.append(1)  # sized below from the final usage, when the server sends no running count
                    cumulative += 1
                    record["count_source"] = "spread"
            if so_far is not None:
                record["output_tokens"] = so_far
                record["input_tokens"] = usage.get("prompt_tokens")
            if event.get("object") == "error" or "error" in event:
                record["error"] = str(event.get("message") or event.get("error"))[:200]
    if endpoint != "generate" and record["count_source"] == "spread" and record["output_tokens"]:
        spread_counts(counts, int(record["output_tokens"]))


def spread_counts(counts: array, total: int) -> None:
    """Without a running count, share the server's final total evenly over the chunks (earlier chunks
    take the remainder): exact for a server that streams a steady number per chunk. Recorded as "spread"."""
    chunks = len(counts)
    if chunks == 0 or total < chunks:
        return
    base, extra = divmod(total, chunks)
    for i in range(chunks):
        counts[i] = base + (1 if i < extra else 0)


class StreamingUser(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}
        key = options.bench_api_key
        if options.bench_api_key_file:
            with open(options.bench_api_key_file) as handle:
                key = handle.read().strip()
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    @task
    def generate(self) -> None:
        options = self.environment.parsed_options
        if LEVEL.stopping:
            gevent.sleep(0.05)
            return
        users = options.num_users or 1  # the level's C, across all processes
        processes, slot = process_slot(self.environment)
        warmup = share(options.bench_warmup if options.bench_warmup >= 0 else users, processes, slot)
        measured = share(options.bench_requests, processes, slot)
        if LEVEL.cpu_start is None:
            LEVEL.cpu_start, LEVEL.wall_start = time.process_time(), time.monotonic()
        index = LEVEL.sent
        LEVEL.sent += 1
        path, body, n_out = request_body(options, index)
        record: dict[str, Any] = {
            "level": users,
            "phase": LEVEL.phase(index, warmup, measured),
            "sent": time.monotonic(),
            "end": 0.0,
            "ok": False,
            "error": "",
            "requested_tokens": n_out,
            "output_tokens": None,
            "input_tokens": None,
            "chunk_times": array("d"),
            "chunk_tokens": array("i"),
            "count_source": "meta_info" if options.bench_endpoint == "generate" else "",
        }
        LEVEL.in_flight[index] = record
        try:
            with self.client.post(path, data=body, headers=self.headers, stream=True, catch_response=True) as response:
                if response.status_code != 200:
                    record["error"] = f"HTTP {response.status_code}: {(response.text or '')[:200]}"
                else:
                    read_stream(response._response, record, options.bench_endpoint)
                record["end"] = time.monotonic()
                if not record["error"] and not record["chunk_times"]:
                    record["error"] = "the stream ended without tokens"
                record["ok"] = not record["error"]
                e2e_ms = (record["end"] - record["sent"]) * 1000
                response.request_meta["response_time"] = e2e_ms  # not the time to the headers
                response.request_meta["response_length"] = record["output_tokens"] or 0
                if record["ok"]:
                    response.success()
                else:
                    response.failure(record["error"])
        except Exception as exc:  # connection refused, reset, malformed stream: the record says which
            record["end"] = record["end"] or time.monotonic()
            record["error"] = record["error"] or f"{type(exc).__name__}: {exc}"[:200]
        finally:
            LEVEL.in_flight.pop(index, None)
            LEVEL.records.append(record)
        if record["ok"] and record["chunk_times"]:
            ttft_ms = (record["chunk_times"][0] - record["sent"]) * 1000
            self.environment.events.request.fire(
                request_type="TTFT", name=path, response_time=ttft_ms, response_length=0, exception=None, context={}
            )
        if record["phase"] == "measured":
            LEVEL.measured_done += 1
            if LEVEL.measured_done == measured:
                runner = self.environment.runner
                if isinstance(runner, WorkerRunner):
                    runner.send_message("bench_done", slot)  # keep loading until the master says quit
                elif not LEVEL.stopping:
                    LEVEL.stopping = True
                    gevent.spawn(runner.quit)


def sample_metrics(environment: Environment) -> None:
    """Sample the server's own throughput and running requests while the level runs."""
    import urllib.request

    options = environment.parsed_options
    url = environment.host.rstrip("/") + "/metrics"
    while not LEVEL.stopping:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                text = answer.read().decode()
        except OSError:
            return  # no /metrics (served only with --enable-metrics): nothing to sample
        values = {name: float(value) for name, value in METRIC_LINE.findall(text)}
        if values:
            LEVEL.samples.append({"time": time.monotonic(), **values})
        gevent.sleep(options.bench_metrics_interval)


@events.init.add_listener
def _init(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, MasterRunner):

        def worker_done(msg: Any, **__: Any) -> None:  # Locust calls it with environment= and msg=
            LEVEL.workers_done += 1
            processes = max(int(getattr(environment.parsed_options, "processes", 1) or 1), 1)
            if LEVEL.workers_done >= processes and not LEVEL.stopping:
                LEVEL.stopping = True
                gevent.spawn(environment.runner.quit)

        environment.runner.register_message("bench_done", worker_done)


@events.test_start.add_listener
def _start(environment: Environment, **_: Any) -> None:
    # Sampled once per level: by the master of --processes N, never by its workers.
    if environment.parsed_options.bench_metrics_interval > 0 and not isinstance(environment.runner, WorkerRunner):
        gevent.spawn(sample_metrics, environment)


@events.quitting.add_listener
def _write(environment: Environment, **_: Any) -> None:
    """All records, including requests still in flight when the level stopped (cut off, never measured)."""
    if LEVEL.written:
        return
    LEVEL.written = True
    LEVEL.stopping = True
    now = time.monotonic()
    for record in LEVEL.in_flight.values():
        record.update(end=now, ok=False, error=record["error"] or "cut off when the level stopped")
        LEVEL.records.append(record)
    lines = [
        json.dumps(
            {
                "type": "request",
                **record,
                "chunk_times": list(record["chunk_times"]),
                "chunk_tokens": list(record["chunk_tokens"]),
            }
        )
        for record in LEVEL.records
    ]
    lines += [json.dumps({"type": "metrics", **sample}) for sample in LEVEL.samples]
    if LEVEL.cpu_start is not None:
        cpu_s, wall_s = time.process_time() - LEVEL.cpu_start, now - LEVEL.wall_start
        lines.append(json.dumps({"type": "loadgen", "cpu_s": cpu_s, "wall_s": wall_s, "requests": LEVEL.sent}))
    if not lines:
        return
    # With --processes N every worker appends its own records: one locked write each.
    with open(environment.parsed_options.bench_records, "a") as out:
        fcntl.flock(out, fcntl.LOCK_EX)
        out.write("\n".join(lines) + "\n")
        out.flush()
