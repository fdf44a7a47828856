"""The workload: streaming generation requests, closed loop at fixed concurrency or open loop at a rate (Locust, headless).

    locust -f benchmarks/locustfile.py --headless -u C -r C --run-time 600 --host URL \
        --bench-output-tokens 256 --bench-requests 64 --bench-records out.jsonl
    locust ... -u 1 -r 1 --bench-request-rate 4 --bench-burstiness 1 --bench-warmup 4 --bench-requests 1000 ...

Closed loop: C users, no think time: each sends a request, reads its stream to the end, sends the next.
Open loop (--bench-request-rate R): one user per process is a scheduler; the level's arrival times are
drawn from the seed (gamma inter-arrivals of shape --bench-burstiness, mean 1/R, the first at 0) and each
request is sent at its planned time on its own greenlet, whether or not earlier ones returned; with
--processes P every process draws the same schedule and sends every P-th arrival, so together they send
exactly that schedule. --bench-max-concurrency N makes a due request wait for one of N slots.
Either way the first `--bench-warmup` requests (default C) are excluded; the next `--bench-requests` are
measured; requests sent after those keep the load steady until the last measured one ends, then the run stops.
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
import socket
import time
from array import array
from typing import Any

import gevent
import gevent.lock
from locust import FastHttpUser, constant, events, task
from locust.env import Environment
from locust.runners import STATE_CLEANUP, STATE_STOPPED, STATE_STOPPING, MasterRunner, WorkerRunner

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
# SGLang 0.5.23's own gauges and counter (sglang/srt/observability/metrics_collector.py) a level keeps.
METRIC_LINE = re.compile(
    r"^(sglang:gen_throughput|sglang:num_running_reqs|sglang:num_queue_reqs|sglang:token_usage"
    r"|sglang:num_retracted_requests_total)(?:\{[^}]*\})?\s+([0-9.eE+-]+)$",
    re.MULTILINE,
)


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
    group.add_argument(
        "--bench-stall-timeout", type=float, default=60.0, help="seconds without a token on any open stream: a hang"
    )
    group.add_argument("--bench-prompts", default="", help="prompts as JSON lines {prompt, output_len} (benchmarks.dataset)")
    group.add_argument("--bench-prefix-groups", type=int, default=0, help="request i opens with group i mod G's shared prefix")
    group.add_argument("--bench-prefix-tokens", type=int, default=0, help="the length of each group's shared prefix")
    group.add_argument("--bench-request-rate", type=float, default=0.0, help="open loop: requests per second (0: closed loop)")
    group.add_argument("--bench-burstiness", type=float, default=1.0, help="open loop: gamma shape of the gaps (1: Poisson)")
    group.add_argument("--bench-max-concurrency", type=int, default=0, help="open loop: at most this many in flight (0: no cap)")
    group.add_argument(
        "--bench-workers", type=int, default=0, help="worker processes across every load-generator host (0: this --processes)"
    )


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
        self.measured_share = 0  # measured requests this process sends (its part of the level's)
        self.reported_done = False  # a worker of --processes N has told the master its share is done
        self.scheduling = False  # open loop: this process's scheduler has started
        self.start_at: float | None = None  # open loop with --processes N: the schedule's zero, from the master
        # This process's CPU and wall clocks at its first request: how busy the load generator itself was.
        self.cpu_start: float | None = None
        self.wall_start = 0.0
        self.last_end = 0.0  # when this process's last request ended
        self.hung = False  # no token came for --bench-stall-timeout s with requests open (watch_for_a_hang)

    def phase(self, index: int, warmup: int, measured: int) -> str:
        # benchmarks.records.phase_of's rule: this file runs alone on the load generator, without the package.
        return "warmup" if index < warmup else "measured" if index < warmup + measured else "cooldown"


LEVEL = Level()


def share(total: int, parts: int, index: int) -> int:
    """This process's part of a level-wide count, when Locust runs --processes N workers."""
    return total // parts + (1 if index < total % parts else 0)


def worker_count(options: Any) -> int:
    """The level's worker processes: on every load-generator host (--bench-workers), or this one's --processes."""
    return max(int(getattr(options, "bench_workers", 0) or getattr(options, "processes", 1) or 1), 1)


def process_slot(environment: Environment) -> tuple[int, int]:
    """(processes, this worker's index): (1, 0) for a plain single-process run. The master numbers its workers
    0, 1, ... as they connect, wherever they run."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        processes = worker_count(environment.parsed_options)
        return processes, runner.worker_index % processes
    return 1, 0


def arrival_gaps(seed: int, rate: float, burstiness: float) -> Any:
    """Seconds between arrivals, endless: gamma(shape=burstiness, mean=1/rate), seeded (vLLM's --burstiness)."""
    chooser = random.Random(seed * 1_000_003 + 700_001)  # apart from the prompts' and lengths' draws
    scale = 1.0 / (rate * burstiness)
    while True:
        yield chooser.gammavariate(burstiness, scale)


def prompt_words(seed: int, index: int, count: int) -> str:
    chooser = random.Random(seed * 1_000_003 + index)
    return " ".join(chooser.choice(WORDS) for _ in range(count))


def prompt_ids(seed: int, index: int, count: int, vocab_size: int) -> list[int]:
    """Token ids inside the vocabulary, clear of the few special ids at its start."""
    chooser = random.Random(seed * 1_000_003 + index)
    low = min(16, vocab_size // 2)
    return [chooser.randrange(low, vocab_size) for _ in range(count)]


PROMPTS: list[dict[str, Any]] = []  # --bench-prompts, read at the first request, in the seed's order


def dataset_prompt(options: Any, index: int) -> dict[str, Any]:
    """The index-th request's prompt from the dataset: a seeded shuffle of the file, taken in turn, cycled."""
    if not PROMPTS:
        with open(options.bench_prompts, encoding="utf-8") as handle:
            PROMPTS.extend(json.loads(line) for line in handle if line.strip())
        random.Random(options.bench_seed).shuffle(PROMPTS)
    return PROMPTS[index % len(PROMPTS)]


def shared_prefix(options: Any, index: int) -> tuple[str, list[int]]:
    """The shared-prefix workload: request i's group (i mod G) prefix, as words and as token ids."""
    if options.bench_prefix_groups <= 0 or options.bench_prefix_tokens <= 0:
        return "", []
    group = index % options.bench_prefix_groups
    seed = options.bench_seed + 900_001  # apart from the per-request prompts' own seeds
    words = prompt_words(seed, group, options.bench_prefix_tokens)
    return words + " ", prompt_ids(seed, group, options.bench_prefix_tokens, options.bench_vocab_size)


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
    text: str | None = None  # a dataset's prompt, sent as text on either endpoint
    if options.bench_prompts:
        item = dataset_prompt(options, index)
        text, n_out = item["prompt"], item.get("output_len") or options.bench_output_tokens
    prefix_words, prefix_ids = shared_prefix(options, index)
    if options.bench_endpoint == "generate":
        ids = prefix_ids + prompt_ids(seed, index, n_in, options.bench_vocab_size)
        prompt: dict[str, Any] = {"text": text} if text is not None else {"input_ids": ids}
        body = {
            **prompt,
            "stream": True,
            "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True, "temperature": 0},
        }
        return "/generate", json.dumps(body).encode(), n_out
    content = text if text is not None else prefix_words + prompt_words(seed, index, n_in)
    body = {
        "model": options.bench_model,
        "messages": [{"role": "user", "content": content}],
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
    # The connection pool's size: a closed-loop user has one request in flight, an open-loop scheduler many.
    concurrency = 100_000

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
        if options.bench_request_rate > 0:
            self.open_loop()
            return
        users = options.num_users or 1  # the level's C, across all processes
        processes, slot = process_slot(self.environment)
        warmup = share(options.bench_warmup if options.bench_warmup >= 0 else users, processes, slot)
        LEVEL.measured_share = share(options.bench_requests, processes, slot)
        if LEVEL.measured_share == 0:  # more processes than measured requests: this one has none to wait for
            self.share_done()
        index = LEVEL.sent
        LEVEL.sent += 1
        record = self.send(index, LEVEL.phase(index, warmup, LEVEL.measured_share), users, None)
        self.count(record)

    def open_loop(self) -> None:
        """This process's scheduler: the level's whole schedule, its every P-th arrival sent at the planned time."""
        if LEVEL.scheduling:
            gevent.sleep(0.05)  # one scheduler per process; any further user idles
            return
        LEVEL.scheduling = True
        options = self.environment.parsed_options
        processes, slot = process_slot(self.environment)
        warmup, measured = max(options.bench_warmup, 0), options.bench_requests  # level-wide, global indices
        LEVEL.measured_share = sum(1 for i in range(warmup, warmup + measured) if i % processes == slot)
        if LEVEL.measured_share == 0:  # more processes than measured requests: this one has none to wait for
            self.share_done()
        if processes > 1:  # every process starts the same schedule at the master's zero
            deadline = time.monotonic() + 10
            while LEVEL.start_at is None and time.monotonic() < deadline:
                gevent.sleep(0.005)
        planned = LEVEL.start_at if LEVEL.start_at is not None else time.monotonic()
        slots = gevent.lock.BoundedSemaphore(options.bench_max_concurrency) if options.bench_max_concurrency > 0 else None
        gaps = arrival_gaps(options.bench_seed, options.bench_request_rate, options.bench_burstiness)
        index = 0
        while not LEVEL.stopping and self.environment.runner.state not in (STATE_STOPPING, STATE_STOPPED, STATE_CLEANUP):
            if index % processes == slot:
                delay = planned - time.monotonic()
                if delay > 0:
                    gevent.sleep(delay)
                if LEVEL.stopping:
                    break
                phase = LEVEL.phase(index, warmup, measured)
                gevent.spawn(self.arrive, index, phase, planned, slots)
                LEVEL.sent += 1
            index += 1
            planned += next(gaps)

    def arrive(self, index: int, phase: str, planned: float, slots: Any) -> None:
        if slots is not None:
            slots.acquire()  # --max-concurrency: wait for a free slot; the lateness records the wait
        try:
            if LEVEL.stopping:
                return
            record = self.send(index, phase, self.environment.parsed_options.bench_request_rate, planned)
        finally:
            if slots is not None:
                slots.release()
        self.count(record)

    def send(self, index: int, phase: str, level: float, planned: float | None) -> dict[str, Any]:
        """One streamed request, start to end; its record (kept for the level's file) whatever happens."""
        options = self.environment.parsed_options
        if LEVEL.cpu_start is None:
            LEVEL.cpu_start, LEVEL.wall_start = time.process_time(), time.monotonic()
        path, body, n_out = request_body(options, index)
        record: dict[str, Any] = {
            "level": level,
            "phase": phase,
            "sent": time.monotonic(),
            "planned": planned,
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
            LEVEL.last_end = time.monotonic()
        if record["ok"] and record["chunk_times"]:
            ttft_ms = (record["chunk_times"][0] - record["sent"]) * 1000
            self.environment.events.request.fire(
                request_type="TTFT", name=path, response_time=ttft_ms, response_length=0, exception=None, context={}
            )
        return record

    def count(self, record: dict[str, Any]) -> None:
        """When this process's last measured request ends, the level ends (all processes' for --processes N)."""
        if record["phase"] != "measured":
            return
        LEVEL.measured_done += 1
        if LEVEL.measured_done == LEVEL.measured_share:
            self.share_done()

    def share_done(self) -> None:
        share_done(self.environment)


def share_done(environment: Environment) -> None:
    """This process's part of the level is over: a worker tells the master, which ends the level when all have."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        if not LEVEL.reported_done:
            LEVEL.reported_done = True
            runner.send_message("bench_done", process_slot(environment)[1])  # load on until the master quits
    elif not LEVEL.stopping:
        LEVEL.stopping = True
        gevent.spawn(runner.quit)


def watch_for_a_hang(environment: Environment) -> None:
    """End the level as a hang when no stream got a token for --bench-stall-timeout s while requests were open.

    Progress is the last chunk of any open stream, the last request that ended, or the level's first send: a
    server that stops producing tokens with requests outstanding (an NCCL hang) is named in that time, not
    after every request's own timeout."""
    stall = environment.parsed_options.bench_stall_timeout
    while not LEVEL.stopping:
        gevent.sleep(min(1.0, stall / 4))
        open_now = list(LEVEL.in_flight.values())
        if not open_now or LEVEL.cpu_start is None:
            continue
        marks = [LEVEL.wall_start, LEVEL.last_end]
        marks += [record["chunk_times"][-1] if record["chunk_times"] else record["sent"] for record in open_now]
        quiet = time.monotonic() - max(marks)
        if quiet < stall:
            continue
        said = f"stalled: no token from the server for {quiet:.0f} s with {len(open_now)} requests open"
        for record in open_now:
            record["error"] = said
        LEVEL.hung = True
        share_done(environment)
        return


def sample_metrics(environment: Environment) -> None:
    """Sample the server's own throughput, running and queued requests, KV use and retractions while the level runs."""
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
            if LEVEL.workers_done >= worker_count(environment.parsed_options) and not LEVEL.stopping:
                LEVEL.stopping = True
                gevent.spawn(environment.runner.quit)

        environment.runner.register_message("bench_done", worker_done)
    elif isinstance(environment.runner, WorkerRunner):

        def schedule_zero(msg: Any, **__: Any) -> None:
            # The master's zero is wall-clock time (its monotonic clock means nothing on another host):
            # turned into this host's monotonic clock on arrival. Hosts agree as well as their clocks (NTP) do.
            LEVEL.start_at = float(msg.data) - time.time() + time.monotonic()

        environment.runner.register_message("bench_start_at", schedule_zero)


@events.test_start.add_listener
def _start(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, MasterRunner) and environment.parsed_options.bench_request_rate > 0:
        # A little ahead, so that every worker has the zero before its first arrival is due.
        environment.runner.send_message("bench_start_at", time.time() + 0.5)
    if not isinstance(environment.runner, MasterRunner):  # where the users are: this process, or each worker
        gevent.spawn(watch_for_a_hang, environment)
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
        load = {"type": "loadgen", "cpu_s": cpu_s, "wall_s": wall_s, "requests": LEVEL.sent, "host": socket.gethostname()}
        lines.append(json.dumps(load))
    if not lines:
        return
    # The times above are this host's monotonic clock; this pair lets records from several hosts share one.
    lines.append(json.dumps({"type": "clock", "wall": time.time(), "monotonic": time.monotonic()}))
    # With --processes N every worker appends its own records: one locked write each.
    with open(environment.parsed_options.bench_records, "a") as out:
        fcntl.flock(out, fcntl.LOCK_EX)
        out.write("\n".join(lines) + "\n")
        out.flush()
