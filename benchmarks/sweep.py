"""One sweep (concurrencies or request rates): playbooks/benchmark.yml through ansible-runner, then the figures per level."""

from __future__ import annotations

import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks import bottleneck, dataset, gpu_telemetry, leftovers, seam
from benchmarks.levels import summarize_level
from benchmarks.processes import stop_process_tree
from benchmarks.workload import Workload, level_name

REPO = Path(__file__).resolve().parents[1]
PLAYBOOK = REPO / seam.BENCHMARK
LOCUSTFILE = REPO / "benchmarks" / "locustfile.py"
LEVEL_TASKS = seam.LEVEL_TASKS  # its command tasks run Locust
LOCAL = ("localhost", "127.0.0.1")
STOP_PLAYBOOK = REPO / seam.BENCHMARK_STOP
STOP_TIMEOUT_S = 60


@dataclass
class SweepResult:
    status: str  # complete, partial, failed, interrupted
    levels: list[dict[str, Any]] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    locust_s: float = 0.0  # wall time Locust ran (warm-up and measured requests), the rest is the harness's own


def run_sweep(
    workload: Workload,
    *,
    url: str = "",
    server_host: str = "",
    inventory: Path | None = None,
    loadgen: str = "localhost",
    api_key: str = "",
    progress: Callable[[str], None] = print,
    prompts_file: Path | None = None,
    after_level: Callable[[dict[str, Any]], bool] | None = None,
) -> SweepResult:
    """Run every level through ansible-runner in a fresh private data dir; levels done survive an interrupt.

    `prompts_file`: the dataset's prompts as benchmarks.dataset writes them (read here when not given).
    `after_level`: called with each level's figures as soon as its records are back (no GPU samples or bottleneck
    yet); False leaves the later levels unmeasured. One playbook run then measures levels that a caller would
    otherwise decide one run at a time (the knee, an SLO), without its start and its reads of the server each time.
    """
    leftovers.remove_stale()  # what a SIGKILLed run left on this machine (it may hold the API key)
    private = Path(tempfile.mkdtemp(prefix=leftovers.prefix(leftovers.RUNNER)))
    try:  # it holds the API key (the playbook's variables): removed on every exit
        return _sweep(private, workload, url, server_host, inventory, loadgen, api_key, progress, prompts_file, after_level)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _sweep(
    private: Path,
    workload: Workload,
    url: str,
    server_host: str,
    inventory: Path | None,
    loadgen: str,
    api_key: str,
    progress: Callable[[str], None],
    prompts_file: Path | None,
    after_level: Callable[[dict[str, Any]], bool] | None,
) -> SweepResult:
    output_dir, private_tmp, gate_dir = _private_dirs(private, gated=after_level is not None)
    if workload.dataset and prompts_file is None:
        prompts_file = dataset.write_prompts(dataset.load_prompts(Path(workload.dataset)), private / "prompts.jsonl")
    work_dir, gpu_work_dir = _work_dirs(loadgen)
    given = {"bench_output_dir": output_dir, "bench_loadgen": loadgen, "bench_api_key": api_key}
    given |= {"bench_work_dir": work_dir, "bench_gpu_work_dir": gpu_work_dir}
    optional = {
        "bench_gate_dir": gate_dir,
        "bench_url": url,
        "bench_server_host": server_host,
        "bench_prompts_source": prompts_file,
    }
    vars_file = unsafe_vars_file(private / "bench-vars.yml", _extravars(workload, given, optional))
    events = _LevelEvents(workload, output_dir, gate_dir, progress, after_level, pending=workload.level_keys())
    envvars = _runner_env(private_tmp)
    # Only the main thread may take signals; a search over several hosts runs sweeps in threads (it takes Ctrl-C itself).
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, events.on_interrupt) if in_main else None
    try:
        runner = run_playbook(
            private,
            PLAYBOOK,
            inventory,
            vars_file,
            envvars,
            event_handler=events.on_event,
            cancel_callback=lambda: events.interrupted,
        )
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        if events.interrupted:
            remote = {"bench_server_host": server_host, "bench_gpu_work_dir": gpu_work_dir, "bench_work_dir": work_dir}
            _stop_interrupted(private, inventory, envvars, progress, loadgen, remote, events.finished, output_dir)
    stats = _artifact_data(runner)
    levels = _levels(workload, output_dir, stats.get(seam.LEVELS_RUN, {}))
    server = stats.get(seam.SERVER, {})
    bottleneck.attach(levels, server)  # a bare URL's caller names them again with its /server_info
    status = "interrupted" if events.interrupted else _status(workload, levels, events.judged)
    error = "" if status in ("complete", "interrupted") else _failure_reason(runner, levels)
    return SweepResult(status=status, levels=levels, server=server, error=error, locust_s=events.locust_s)


def _private_dirs(private: Path, *, gated: bool) -> tuple[Path, Path, Path | None]:
    """The records' folder, the modules' TMPDIR and (with a caller's word after each level) the gate folder."""
    output_dir, private_tmp, gate_dir = private / "artifacts" / "records", private / "tmp", private / "gate"
    for folder in (output_dir, private_tmp, *([gate_dir] if gated else [])):
        folder.mkdir(parents=True)
    return output_dir, private_tmp, gate_dir if gated else None


def _work_dirs(loadgen: str) -> tuple[str, str]:
    """Locust's folder on the load generator (this machine's temporary folder when it is local) and the GPU
    sampler's on the server host: named here so that an interrupted sweep removes them (playbooks/benchmark_stop.yml
    for the remote ones)."""
    local_tmp = Path(tempfile.gettempdir()) if loadgen in LOCAL else Path("/tmp")
    work_dir = str(local_tmp / f"{leftovers.prefix(leftovers.WORK)}{secrets.token_hex(8)}")
    return work_dir, f"/tmp/{leftovers.prefix(leftovers.GPU)}{secrets.token_hex(8)}"


def _runner_env(private_tmp: Path) -> dict[str, str]:
    return {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        # Modules run here unpack into TMPDIR; an interrupted one leaves that behind unless it is ours.
        "TMPDIR": str(private_tmp),
    }


def _stop_interrupted(
    private: Path,
    inventory: Path | None,
    envvars: dict[str, str],
    progress: Callable[[str], None],
    loadgen: str,
    remote: dict[str, str],
    finished: set[str],
    output_dir: Path,
) -> None:
    """After Ctrl-C: whatever was started here stops, finished levels' records are kept, and the hosts' own
    leftovers (the GPU sampler, a remote Locust and their folders) go by playbooks/benchmark_stop.yml."""
    stop_process_tree()  # anything started between the signal and the runner's return
    work_dir = remote["bench_work_dir"]
    if loadgen in LOCAL:
        _keep_finished_levels(Path(work_dir), output_dir, finished)
        shutil.rmtree(work_dir, ignore_errors=True)
    else:
        remote = {**remote, "bench_remote_loadgen": loadgen}
    if remote["bench_server_host"] or loadgen not in LOCAL:
        stop_on_hosts(private, inventory, remote, envvars, progress)


def _extravars(workload: Workload, given: dict[str, Any], optional: dict[str, Any]) -> dict[str, Any]:
    """The playbook's variables: the workload's, the sweep's own, and those of `optional` that are set."""
    sweep = {**given, **{name: value for name, value in optional.items() if value}}
    extravars = {**workload.extravars(), "bench_locustfile": str(LOCUSTFILE)}
    extravars |= {name: str(value) if isinstance(value, Path) else value for name, value in sweep.items()}
    if extravars["bench_loadgen"] in LOCAL:  # here: this venv's Locust; elsewhere the one playbooks/loadgen.yml installed
        extravars["bench_locust"] = str(Path(sys.executable).parent / "locust")
    return extravars


@dataclass
class _LevelEvents:
    """What the playbook's events say while it runs: which level Locust is on, which are done, the caller's word
    on each (`after_level`, handed to the playbook through the gate folder) and Ctrl-C."""

    workload: Workload
    output_dir: Path
    gate_dir: Path | None
    progress: Callable[[str], None]
    after_level: Callable[[dict[str, Any]], bool] | None
    pending: list[str]
    finished: set[str] = field(default_factory=set)  # levels whose Locust run ended (their records are complete)
    judged: dict[str, bool] = field(default_factory=dict)  # after_level's word per level
    interrupted: bool = False
    locust_s: float = 0.0
    _level: str = "?"
    _started: float = 0.0

    def judge(self, data: dict[str, Any]) -> None:
        """The level's records are back: after_level's word, for the playbook's next level to read."""
        if self.after_level is None or self.gate_dir is None:
            return
        reported = (data.get("res", {}).get("ansible_stats", {}).get("data", {}) or {}).get(seam.LEVELS_RUN, {})
        for key, run in reported.items():
            if key in self.judged:
                continue
            workload, arrival = self.workload, self.workload.arrival(key)
            path = records_path(self.output_dir, key)
            level = summarize_level(
                None if arrival else int(key), path, run, workload.measured_requests(key), workload.goodput, arrival
            )
            try:
                self.judged[key] = bool(self.after_level(level))
            finally:  # a caller that raised stops the sweep rather than leaving the playbook waiting
                word = "go" if self.judged.get(key) else "stop"
                (self.gate_dir / f".after-{key}").write_text(word)
                (self.gate_dir / f".after-{key}").rename(self.gate_dir / f"after-{key}")

    def on_event(self, event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and is_level_report(data):
            self.judge(data)
        is_locust = is_locust_task(data)
        if event.get("event") == "playbook_on_task_start" and is_locust:
            self._started = time.monotonic()
            if self.pending:
                self._level = key = self.pending.pop(0)
                measured, bound = self.workload.measured_requests(key), self.workload.level_timeout
                self.progress(f"  {_name(self.workload, key)}: running ({measured} measured requests, at most {bound} s)")
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and is_locust:
            self.finished.add(self._level)
            took = time.monotonic() - (self._started or time.monotonic())
            self.locust_s += took
            rc = data.get("res", {}).get("rc")
            self.progress(f"  {_name(self.workload, self._level)}: locust finished in {took:.1f} s (rc {rc})")
        return True

    def on_interrupt(self, signum: int, frame: object) -> None:
        if self.interrupted:
            return
        self.interrupted = True
        self.progress("  interrupted: stopping the level in progress (and everything it started); levels done are kept")
        stop_process_tree()


def _levels(workload: Workload, output_dir: Path, levels_run: dict[str, Any]) -> list[dict[str, Any]]:
    """Each level that started, summarized from its records, with the server's GPU samples where taken."""
    levels = []
    for key in workload.level_keys():
        path = records_path(output_dir, key)
        if key not in levels_run and not path.exists():
            continue  # never started (interrupted or the play failed before it)
        arrival = workload.arrival(key)
        concurrency = None if arrival else int(key)
        measured = workload.measured_requests(key)
        level = summarize_level(concurrency, path, levels_run.get(key), measured, workload.goodput, arrival)
        samples = output_dir / f"gpu-level-{key}.txt"  # the server host's GPUs during the level (with --server-host)
        if samples.is_file():
            level["gpus"] = gpu_telemetry.summarize(gpu_telemetry.parse_dmon(samples.read_text()), workload.gpu_interval)
        levels.append(level)
    return levels


def _status(workload: Workload, levels: list[dict[str, Any]], judged: dict[str, bool]) -> str:
    """complete: every level, or every level until the caller said stop; partial: some measured; else failed."""
    keys = workload.level_keys()
    if not levels:
        return "failed"
    if all(level["status"] == "ok" for level in levels) and (
        len(levels) == len(keys) or judged.get(keys[len(levels) - 1]) is False
    ):
        return "complete"
    return "partial" if any(level["status"] != "failed" for level in levels) else "failed"


def run_playbook(
    private: Path, playbook: Path, inventory: Path | None, vars_file: Path, envvars: dict[str, str], **options: Any
) -> Any:
    """One playbook of this project through ansible-runner, its variables from a file (never on a command line)."""
    import ansible_runner

    return ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(REPO),
        playbook=str(playbook),
        inventory=str(inventory) if inventory else None,
        cmdline=f"-e @{vars_file}",
        quiet=True,
        envvars=envvars,
        **options,
    )


def stop_on_hosts(
    private: Path, inventory: Path | None, variables: dict[str, Any], envvars: dict[str, str], progress: Callable[[str], None]
) -> None:
    """After an interrupt: stop the sampler on the server host and Locust on remote load generators, and remove
    their directories (playbooks/benchmark_stop.yml), bounded in time; a second Ctrl-C gives up on it."""
    stop_dir = private / "stop"
    stop_dir.mkdir(exist_ok=True)
    vars_file = unsafe_vars_file(stop_dir / "stop-vars.yml", {k: v for k, v in variables.items() if v})
    progress("  interrupted: stopping what the sweep started on the hosts (the GPU sampler, remote Locust)")
    try:
        stopped = run_playbook(stop_dir, STOP_PLAYBOOK, inventory, vars_file, envvars, timeout=STOP_TIMEOUT_S)
    except KeyboardInterrupt:
        stop_process_tree()
        progress("  interrupted again: the sampler on the server host stops at its own time bound")
        return
    if stopped.status != "successful":
        progress(f"  could not stop everything on the hosts (the stop playbook ended {stopped.status})")


def records_path(output_dir: Path, key: str) -> Path:
    """A level's records: one file from one load generator, or a directory of one file per host from several."""
    several = output_dir / f"level-{key}"
    return several if several.is_dir() else output_dir / f"level-{key}.jsonl"


def parse_loadgen(text: str) -> str:
    """`--loadgen-hosts a,b`: inventory names, comma-separated (Locust's master runs on the first)."""
    import argparse
    import re

    names = text.split(",")
    if not all(re.fullmatch(r"[A-Za-z0-9_.-]+", name) for name in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"--loadgen-hosts {text!r}: write inventory host names separated by commas, each once, e.g. lg-1,lg-2"
        )
    return ",".join(names)


def _name(workload: Workload, key: str) -> str:
    arrival = workload.arrival(key)
    return level_name({"arrival": arrival} if arrival else {"concurrency": key})


def is_locust_task(event_data: dict[str, Any]) -> bool:
    """The one command task of playbooks/tasks/benchmark_level.yml: found by file and module, not by its name."""
    path = str(event_data.get("task_path", "")).rsplit(":", 1)[0]
    return path.endswith(LEVEL_TASKS) and event_data.get("task_action") in ("ansible.builtin.command", "command")


def is_level_report(event_data: dict[str, Any]) -> bool:
    """The set_stats task that ends each level of playbooks/tasks/benchmark_level.yml, its records fetched."""
    path = str(event_data.get("task_path", "")).rsplit(":", 1)[0]
    return path.endswith(LEVEL_TASKS) and str(event_data.get("task_action", "")).endswith("set_stats")


def _keep_finished_levels(work_dir: Path, output_dir: Path, finished: set[str]) -> None:
    """Bring back the records of levels that ended before an interrupt but were not fetched yet."""
    for key in finished:
        source, target = work_dir / f"level-{key}.jsonl", output_dir / f"level-{key}.jsonl"
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


def _artifact_data(runner: Any) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for event in runner.events:
        if event.get("event") == "playbook_on_stats":
            data.update(event.get("event_data", {}).get("artifact_data", {}) or {})
    return data


def _failure_reason(runner: Any, levels: list[dict[str, Any]]) -> str:
    failed_levels = [level for level in levels if level["status"] == "failed"]
    if failed_levels:
        return f"{level_name(failed_levels[0])}: {failed_levels[0].get('error', 'failed')}"
    for event in runner.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_unreachable":
            message = str(data.get("res", {}).get("msg", "")).strip()[:400]
            return f"{data.get('host', 'a host')} is unreachable over SSH ({message}); check its address, port and key"
        if event.get("event") == "runner_on_failed":
            return str(data.get("res", {}).get("msg", "the benchmark playbook failed"))[:500]
    return "" if runner.status == "successful" else f"the benchmark playbook ended {runner.status}"
