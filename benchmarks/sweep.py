"""One concurrency sweep: playbooks/benchmark.yml through ansible-runner, then the figures per level."""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.metrics import level_metrics, window
from benchmarks.records import RequestRecord

REPO = Path(__file__).resolve().parents[1]
PLAYBOOK = REPO / "playbooks" / "benchmark.yml"
LOCUSTFILE = REPO / "benchmarks" / "locustfile.py"


class EndpointError(ValueError):
    """The endpoint cannot be benchmarked: says what is wrong and what to do."""


@dataclass
class Workload:
    levels: list[int]
    endpoint: str = "chat"  # chat: /v1/chat/completions; generate: SGLang's native /generate
    model: str = "default"
    input_tokens: int = 128
    output_tokens: int = 256
    seed: int = 0
    vocab_size: int = 32000  # /generate: token ids are drawn below it
    warmup: int = -1  # requests excluded first; -1: one per user
    rounds: int = 4  # measured requests = max(min_requests, rounds x C)
    min_requests: int = 16
    level_timeout: int = 600
    metrics_interval: float = 1.0
    processes: int = 1  # Locust --processes: load-generator cores (more than ~128 fast streams per core)

    def measured_requests(self, concurrency: int) -> int:
        return max(self.min_requests, self.rounds * concurrency)

    def extravars(self) -> dict[str, Any]:
        return {
            "bench_levels": self.levels, "bench_endpoint": self.endpoint, "bench_model": self.model,
            "bench_input_tokens": self.input_tokens, "bench_output_tokens": self.output_tokens, "bench_seed": self.seed,
            "bench_vocab_size": self.vocab_size,
            "bench_warmup": self.warmup, "bench_measured": {str(c): self.measured_requests(c) for c in self.levels},
            "bench_level_timeout": self.level_timeout, "bench_metrics_interval": self.metrics_interval,
            "bench_processes": self.processes,
        }  # fmt: skip


@dataclass
class SweepResult:
    status: str  # complete, partial, failed, interrupted
    levels: list[dict[str, Any]] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def check_url(url: str) -> str:
    """A base URL we can benchmark, or EndpointError naming the problem."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise EndpointError(f"endpoint URL {url!r} is malformed: give it as http://HOST:PORT (e.g. http://10.0.0.5:30001)")
    try:
        parsed.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError as exc:
        raise EndpointError(f"endpoint URL {url!r} has an invalid port: {exc}") from exc
    return f"{parsed.scheme}://{parsed.netloc}"


def probe(url: str, api_key: str = "", timeout: float = 10) -> dict[str, Any]:
    """Ask the server what it is (/server_info) before spending minutes on a sweep."""
    request = urllib.request.Request(url + "/server_info", headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            info = json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise EndpointError(f"{url} refused the request ({exc.code}): pass the server's --api-key with --api-key") from exc
        if exc.code == 404:
            return {}  # an OpenAI-compatible server without SGLang's /server_info
        raise EndpointError(f"{url}/server_info answered HTTP {exc.code}: the server is not ready or not SGLang") from exc
    except (OSError, ValueError) as exc:
        raise EndpointError(f"{url} is unreachable ({exc}): check the server is running (playbooks/status.yml) "
                            "and that this machine can reach its port") from exc  # fmt: skip
    return info if isinstance(info, dict) else {}


def read_level(path: Path) -> tuple[list[RequestRecord], list[dict[str, float]]]:
    requests, samples = [], []
    for line in path.read_text().splitlines():
        item = json.loads(line)
        kind = item.pop("type", "request")
        if kind == "request":
            requests.append(RequestRecord.from_dict(item))
        else:
            samples.append(item)
    return requests, samples


def server_samples(samples: list[dict[str, float]], window: tuple[float, float] | None) -> dict[str, float | None]:
    """The server's own gen_throughput and running requests, averaged over the measured window."""
    inside = [s for s in samples if window and window[0] <= s["time"] <= window[1]]

    def mean(key: str) -> float | None:
        values = [s[key] for s in inside if key in s]
        return sum(values) / len(values) if values else None

    return {"gen_throughput": mean("sglang:gen_throughput"), "num_running_reqs": mean("sglang:num_running_reqs"),
            "samples": len(inside)}  # fmt: skip


def summarize_level(concurrency: int, path: Path, run: dict[str, Any] | None, requested: int) -> dict[str, Any]:
    if not path.exists():
        reason = (run or {}).get("stderr", "").strip().splitlines()[-1:] or ["no records came back"]
        return {"concurrency": concurrency, "status": "failed", "error": reason[0][:300], "completed": 0, "failed": 0}
    records, samples = read_level(path)
    figures = level_metrics(records, concurrency)
    figures["server_metrics"] = server_samples(samples, window(records))
    if figures["completed"] == 0:
        status = "failed"
    elif figures["completed"] < requested or figures["failed"]:
        status = "partial"
    else:
        status = "ok"
    figures["status"] = status
    if status == "failed":
        figures["error"] = (figures.get("errors") or ["no request completed"])[0]
    return figures


def run_sweep(
    workload: Workload,
    *,
    url: str = "",
    server_host: str = "",
    inventory: Path | None = None,
    loadgen: str = "localhost",
    api_key: str = "",
    progress: Callable[[str], None] = print,
) -> SweepResult:
    """Run every level through ansible-runner in a fresh private data dir; levels done survive an interrupt."""
    import ansible_runner

    private = Path(tempfile.mkdtemp(prefix="sglang-bench-runner-"))
    output_dir = private / "artifacts" / "records"
    output_dir.mkdir(parents=True)
    extravars = {**workload.extravars(), "bench_output_dir": str(output_dir), "bench_loadgen": loadgen,
                 "bench_locust": str(Path(sys.executable).parent / "locust"), "bench_locustfile": str(LOCUSTFILE),
                 "bench_api_key": api_key}  # fmt: skip
    if url:
        extravars["bench_url"] = url
    if server_host:
        extravars["bench_server_host"] = server_host
    interrupted = {"flag": False}
    pending = list(workload.levels)
    started: dict[str, float] = {}

    def on_event(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        task = data.get("task", "")
        if event.get("event") == "playbook_on_task_start" and task == "Level | Run Locust at the concurrency":
            started["t"] = time.monotonic()
            if pending:
                concurrency = pending.pop(0)
                measured = workload.measured_requests(concurrency)
                progress(f"  C={concurrency}: running ({measured} measured requests, at most {workload.level_timeout} s)")
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and task == "Level | Run Locust at the concurrency":
            level = data.get("res", {}).get("invocation", {}).get("module_args", {}).get("argv", [])
            users = next((a.split("=", 1)[1] for a in level if a.startswith("--users=")), "?")
            rc = data.get("res", {}).get("rc")
            progress(f"  C={users}: locust finished in {time.monotonic() - started.get('t', time.monotonic()):.1f} s (rc {rc})")
        return True

    def on_interrupt(signum: int, frame: object) -> None:
        interrupted["flag"] = True
        progress("  interrupted: stopping after the level in progress is cut off; levels done are kept")

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private), project_dir=str(REPO), playbook=str(PLAYBOOK),
            inventory=str(inventory) if inventory else None, extravars=extravars, quiet=True,
            envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
            event_handler=on_event, cancel_callback=lambda: interrupted["flag"],
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    stats = _artifact_data(runner)
    levels_run = stats.get("bench_levels_run", {})
    server = stats.get("bench_server", {})
    levels = []
    for concurrency in workload.levels:
        path = output_dir / f"level-{concurrency}.jsonl"
        if str(concurrency) not in levels_run and not path.exists():
            continue  # never started (interrupted or the play failed before it)
        measured = workload.measured_requests(concurrency)
        levels.append(summarize_level(concurrency, path, levels_run.get(str(concurrency)), measured))
    if interrupted["flag"]:
        status = "interrupted"
    elif not levels:
        status = "failed"
    elif all(level["status"] == "ok" for level in levels) and len(levels) == len(workload.levels):
        status = "complete"
    elif any(level["status"] != "failed" for level in levels):
        status = "partial"
    else:
        status = "failed"
    error = "" if status in ("complete", "interrupted") else _failure_reason(runner, levels)
    shutil.rmtree(private, ignore_errors=True)
    return SweepResult(status=status, levels=levels, server=server, error=error)


def _artifact_data(runner: Any) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for event in runner.events:
        if event.get("event") == "playbook_on_stats":
            data.update(event.get("event_data", {}).get("artifact_data", {}) or {})
    return data


def _failure_reason(runner: Any, levels: list[dict[str, Any]]) -> str:
    failed_levels = [level for level in levels if level["status"] == "failed"]
    if failed_levels:
        return f"C={failed_levels[0]['concurrency']}: {failed_levels[0].get('error', 'failed')}"
    for event in runner.events:
        if event.get("event") == "runner_on_failed":
            return str(event.get("event_data", {}).get("res", {}).get("msg", "the benchmark playbook failed"))[:500]
    return "" if runner.status == "successful" else f"the benchmark playbook ended {runner.status}"
