"""One concurrency sweep: playbooks/benchmark.yml through ansible-runner, then the figures per level."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
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

import yaml

from benchmarks.metrics import level_metrics, window
from benchmarks.records import RequestRecord

REPO = Path(__file__).resolve().parents[1]
PLAYBOOK = REPO / "playbooks" / "benchmark.yml"
LOCUSTFILE = REPO / "benchmarks" / "locustfile.py"
LEVEL_TASKS = "playbooks/tasks/benchmark_level.yml"  # its only command task runs Locust


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


HOST_NAME = re.compile(r"[A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")


def check_url(url: str) -> str:
    """A base URL we can benchmark, or EndpointError naming the problem (a password in it is never echoed)."""
    malformed = "give it as http://HOST:PORT (e.g. http://10.0.0.5:30001)"
    if not isinstance(url, str) or len(url) > 2048 or any(ord(char) < 0x21 or ord(char) == 0x7F for char in url):
        raise EndpointError(f"endpoint URL {url[:80]!r} is malformed (spaces or control characters): {malformed}")
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port  # raises on a port that is not a number or out of range
    except ValueError as exc:
        raise EndpointError(f"endpoint URL {url[:80]!r} is malformed ({exc}): {malformed}") from exc
    if "@" in parsed.netloc:
        raise EndpointError(
            "endpoint URL holds a user or password (user:password@): give the API key in $SGLANG_API_KEY or "
            "--api-key-file instead, so it stays out of folder names and records"
        )
    host = parsed.netloc.rsplit(":", 1)[0] if port is not None else parsed.netloc
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not HOST_NAME.fullmatch(host):
        raise EndpointError(f"endpoint URL {url[:80]!r} is malformed: {malformed}")
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
    work_dir = f"/tmp/sglang-bench-{secrets.token_hex(8)}"  # on the load generator; removed here if interrupted
    extravars = {**workload.extravars(), "bench_output_dir": str(output_dir), "bench_loadgen": loadgen,
                 "bench_locust": str(Path(sys.executable).parent / "locust"), "bench_locustfile": str(LOCUSTFILE),
                 "bench_api_key": api_key, "bench_work_dir": work_dir}  # fmt: skip
    if url:
        extravars["bench_url"] = url
    if server_host:
        extravars["bench_server_host"] = server_host
    vars_file = unsafe_vars_file(private / "bench-vars.yml", extravars)
    interrupted = {"flag": False}
    pending = list(workload.levels)
    started: dict[str, float] = {}
    finished: set[str] = set()  # levels whose Locust run ended (their records are complete)

    def on_event(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        is_locust = is_locust_task(data)
        if event.get("event") == "playbook_on_task_start" and is_locust:
            started["t"] = time.monotonic()
            if pending:
                concurrency = pending.pop(0)
                measured = workload.measured_requests(concurrency)
                progress(f"  C={concurrency}: running ({measured} measured requests, at most {workload.level_timeout} s)")
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and is_locust:
            level = data.get("res", {}).get("invocation", {}).get("module_args", {}).get("argv", [])
            users = next((a.split("=", 1)[1] for a in level if a.startswith("--users=")), "?")
            rc = data.get("res", {}).get("rc")
            finished.add(users)
            progress(f"  C={users}: locust finished in {time.monotonic() - started.get('t', time.monotonic()):.1f} s (rc {rc})")
        return True

    def on_interrupt(signum: int, frame: object) -> None:
        if interrupted["flag"]:
            return
        interrupted["flag"] = True
        progress("  interrupted: stopping the level in progress (and everything it started); levels done are kept")
        stop_process_tree()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private), project_dir=str(REPO), playbook=str(PLAYBOOK),
            inventory=str(inventory) if inventory else None, cmdline=f"-e @{vars_file}", quiet=True,
            envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
            event_handler=on_event, cancel_callback=lambda: interrupted["flag"],
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
        if interrupted["flag"]:
            stop_process_tree()  # anything started between the signal and the runner's return
            if loadgen in ("localhost", "127.0.0.1"):
                _keep_finished_levels(Path(work_dir), output_dir, finished)
                shutil.rmtree(work_dir, ignore_errors=True)
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


def is_locust_task(event_data: dict[str, Any]) -> bool:
    """The one command task of playbooks/tasks/benchmark_level.yml: found by file and module, not by its name."""
    path = str(event_data.get("task_path", "")).rsplit(":", 1)[0]
    return path.endswith(LEVEL_TASKS) and event_data.get("task_action") in ("ansible.builtin.command", "command")


def _keep_finished_levels(work_dir: Path, output_dir: Path, finished: set[str]) -> None:
    """Bring back the records of levels that ended before an interrupt but were not fetched yet."""
    for users in finished:
        source, target = work_dir / f"level-{users}.jsonl", output_dir / f"level-{users}.jsonl"
        if source.is_file() and not target.exists():
            shutil.copyfile(source, target)


def unsafe_vars_file(path: Path, variables: dict[str, Any]) -> Path:
    """The playbook's variables as YAML with every string tagged !unsafe: Ansible never templates them.

    A model name or key such as `k{{ 6*7 }}` (or a `lookup('pipe', ...)`) reaches Locust as written.
    """

    class Unsafe(str):
        pass

    class UnsafeDumper(yaml.SafeDumper):
        pass

    def mark(value: Any) -> Any:
        # Values only: Ansible looks keys up by plain strings. `!unsafe ''` reads as null, and '' holds no template.
        if isinstance(value, dict):
            return {key: mark(item) for key, item in value.items()}
        if isinstance(value, list):
            return [mark(item) for item in value]
        return Unsafe(value) if isinstance(value, str) and value else value

    UnsafeDumper.add_representer(Unsafe, lambda dumper, text: dumper.represent_scalar("!unsafe", str(text), style="'"))
    path.write_text(yaml.dump(mark(variables), Dumper=UnsafeDumper))
    path.chmod(0o600)  # it may hold the API key
    return path


def stop_process_tree(grace: float = 3.0) -> None:
    """Stop everything this process started (ansible-playbook, its workers, Locust and its processes)."""
    import psutil

    def running(process: psutil.Process) -> bool:
        try:
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    # Polled, never waited for: ansible-runner reaps its own child, and a second waitpid would confuse it.
    deadline = time.monotonic() + grace
    while any(running(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    for child in children:
        if running(child):
            with contextlib.suppress(psutil.Error):
                child.kill()


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
