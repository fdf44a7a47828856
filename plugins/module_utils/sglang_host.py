"""What this project's modules read and do on the GPU host: a unit's state, its health, the GPUs' holders.

Shared by sglang_wait_healthy, sglang_gpu_holders, sglang_swap, sglang_units, sglang_swap_follow and
sglang_wait_file (they import it as ansible.module_utils.sglang_host; ansible.cfg names this folder).
Standard library only: it runs on the host, where neither the project nor its requirements are installed.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
RunCommand = Callable[[list[str]], tuple[int, str, str]]

EXIT_CGROUP = "219"  # systemd.exec(5), "Process exit codes"
STATE_PROPERTIES = ("ActiveState", "SubState", "Result", "ExecMainStatus", "InvocationID", "ExecMainStartTimestampMonotonic")
BUS_QUERY = ["--query-gpu=index,pci.bus_id", "--format=csv,noheader"]
APPS_QUERY = ["--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv,noheader,nounits"]


class HostError(Exception):
    """A command on the host failed where the caller cannot go on."""


def unit_state(run: RunCommand, unit: str) -> dict[str, str]:
    rc, out, err = run(["systemctl", "show", unit] + [f"--property={name}" for name in STATE_PROPERTIES])
    if rc != 0:
        raise HostError(f"systemctl show {unit} failed: {err.strip()}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def seconds_since_start(state: dict[str, str]) -> float | None:
    """How long ago the unit's main process started, on CLOCK_MONOTONIC (systemd's and time.monotonic's clock)."""
    started_us = state.get("ExecMainStartTimestampMonotonic", "")
    if not started_us.isdigit() or int(started_us) == 0:
        return None
    return round(time.monotonic() - int(started_us) / 1e6, 1)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # an http URL the role composes
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def wait_healthy(
    read_state: Callable[[], dict[str, str]],
    read_status: Callable[[], int],
    start_again: Callable[[], None] | None,
    timeout: float,
    interval: float,
) -> tuple[str, int, dict[str, str], int]:
    """Poll until healthy, exited or the timeout: (outcome, last HTTP status, unit state, restarts).

    `start_again`, when given, is used once, for a start systemd itself failed with 219/CGROUP: right after
    the same unit stopped, systemd can lose that race (systemd/systemd#12386, #23163) before the server ran.
    """
    deadline = time.monotonic() + timeout
    status, restarts = 0, 0
    while True:
        state = read_state()
        if state.get("ActiveState") not in ("active", "activating", "reloading"):
            if start_again is not None and restarts == 0 and state.get("ExecMainStatus") == EXIT_CGROUP:
                start_again()
                restarts += 1
                continue
            return "exited", status, state, restarts
        status = read_status()
        if status == 200 and read_state().get("ActiveState") == "active":
            return "healthy", status, state, restarts
        if time.monotonic() >= deadline:
            return "timeout", status, state, restarts
        time.sleep(interval)


def poll(
    read: Callable[[], T],
    done: Callable[[T], bool],
    wait: float,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Read every `interval` seconds until `done` says so or `wait` seconds have gone: the last value read."""
    deadline = clock() + wait
    while True:
        value = read()
        if done(value) or clock() >= deadline:
            return value
        sleep(min(interval, max(deadline - clock(), 0.0)))


def unhealthy_reason(unit: str, url: str, timeout: float, outcome: str, status: int, state: dict[str, str]) -> str:
    if outcome == "exited":
        return f"{unit} exited ({state.get('Result')}, status {state.get('ExecMainStatus')})"
    return f"{unit} did not answer 200 on {url} within {timeout} s (last status {status})"


# SGLang 0.5.23's own log lines that end each startup phase (model_runner.py "Load weight end.",
# kv_cache_configurator.py "Memory pool end.", cuda_graph_setup.py "Capture target decode CUDA graph end."
# (CPU graph on CPU; prefill, verify and draft captures too), http_server.py "The server is fired up and
# ready to roll!"); every rank and capture logs its own: the last one counts.
STARTUP_MARKS = (
    ("weights_loaded", re.compile(r"Load weight end\.")),
    ("kv_cache_sized", re.compile(r"Memory pool end\.")),
    ("graphs_captured", re.compile(r"Capture .*graph end\.", re.IGNORECASE)),
    ("ready", re.compile(r"The server is fired up and ready to roll!")),
)
STARTUP_JOURNAL_LINES = 20000  # a start of a large model logs a few thousand lines (a line per rank and step)
_MONOTONIC_LINE = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")


def startup_phases(journal: str, started_us: str) -> dict[str, float]:
    """Seconds from the unit's start to the end of each startup phase SGLang logged, from journalctl's
    --output=short-monotonic lines (CLOCK_MONOTONIC, as ExecMainStartTimestampMonotonic)."""
    if not started_us.isdigit() or int(started_us) == 0:
        return {}
    start = int(started_us) / 1e6
    found: dict[str, float] = {}
    for line in journal.splitlines():
        stamp = _MONOTONIC_LINE.match(line)
        if not stamp:
            continue
        for phase, mark in STARTUP_MARKS:
            if mark.search(line):
                found[phase] = round(float(stamp.group(1)) - start, 1)
    return {phase: found[phase] for phase, _ in STARTUP_MARKS if phase in found}


def journal_argv(unit: str, invocation: str, lines: int, output: str = "cat") -> list[str]:
    """journalctl reading one start of a unit: the server's lines and systemd's about it.

    systemd's lines (set-up failures, the exit status) carry INVOCATION_ID=; the process's carry
    _SYSTEMD_INVOCATION_ID=, and only once it is in the unit's cgroup. Without an invocation (the unit
    never started), the unit's whole journal.
    """
    head = ["journalctl", "--no-pager", f"--output={output}", f"--lines={int(lines)}"]
    invocation = invocation.strip()
    if not invocation:
        return [*head, f"--unit={unit}"]
    return [*head, f"_SYSTEMD_INVOCATION_ID={invocation}", "+", f"INVOCATION_ID={invocation}"]


def parse_bus_ids(text: str) -> dict[str, int]:
    """`0, 00000000:01:00.0` lines -> {bus id (upper case): index}."""
    found = {}
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            found[parts[1].upper()] = int(parts[0])
    return found


def parse_holders(text: str, bus_ids: dict[str, int], wanted: set[int]) -> list[dict]:
    """Compute-app lines on the wanted GPUs -> [{gpu, pid, name, used_mib}]."""
    holders = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 4 or not parts[1].isdigit():
            continue
        gpu = bus_ids.get(parts[0].upper())
        if gpu is None or gpu not in wanted:
            continue
        used = int(parts[3]) if parts[3].isdigit() else 0
        holders.append({"gpu": gpu, "pid": int(parts[1]), "name": parts[2], "used_mib": used})
    return holders


def unit_of(pid: int) -> str:
    """The systemd service whose cgroup the process runs in ('' when none or unreadable)."""
    try:
        with open(f"/proc/{pid}/cgroup") as handle:
            groups = handle.read()
    except OSError:
        return ""
    # The innermost service counts (a container's own unit may enclose it).
    services = [part for line in groups.splitlines() for part in line.split("/") if part.endswith(".service")]
    return services[-1] if services else ""


def describe(holders: list[dict]) -> str:
    by_pid: dict[int, dict] = {}
    for holder in holders:
        entry = by_pid.setdefault(holder["pid"], {"name": holder["name"], "gpus": [], "mib": 0})
        entry["gpus"].append(holder["gpu"])
        entry["mib"] += holder["used_mib"]
    return "; ".join(
        f"pid {pid} ({item['name']}{', unit ' + unit_of(pid) if unit_of(pid) else ''})"
        f" on GPU {','.join(map(str, sorted(item['gpus'])))} holding {item['mib']} MiB"
        for pid, item in sorted(by_pid.items())
    )


def gpu_indices(text: str) -> set[int]:
    """'0,1,2' -> {0, 1, 2}; ValueError for anything else."""
    return {int(part) for part in text.split(",") if part.strip()}


class GpuHolders:
    """The compute processes on some GPUs, asked of nvidia-smi (bus ids read once)."""

    def __init__(self, run: RunCommand, smi: str, wanted: set[int], foreign_only: list[str]) -> None:
        self.run, self.smi, self.wanted, self.foreign_only = run, smi, wanted, foreign_only
        self.bus_ids = parse_bus_ids(self._ask(BUS_QUERY))

    def _ask(self, query: list[str]) -> str:
        rc, out, err = self.run([self.smi, *query])
        if rc != 0:
            raise HostError(f"nvidia-smi {' '.join(query)} failed (rc {rc}): {(err or out).strip()[:300]}")
        return out

    def now(self) -> list[dict]:
        holders = parse_holders(self._ask(APPS_QUERY), self.bus_ids, self.wanted)
        if self.foreign_only:
            holders = [h for h in holders if unit_of(h["pid"]) not in self.foreign_only]
        return holders

    def wait_free(self, timeout: float, interval: float) -> list[dict]:
        """[] once nothing holds the GPUs; the holders still there at the timeout otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            holders = self.now()
            if not holders or time.monotonic() >= deadline:
                return holders
            time.sleep(interval)

    def still_held(self, holders: list[dict], timeout: float) -> str:
        return (
            f"GPU {','.join(map(str, sorted(self.wanted)))} still held after {timeout} s by {describe(holders)}. "
            "Stop those processes (a server started by hand?) or raise sglang_service_gpu_free_timeout; "
            "the new layout was not started, since it would run out of memory loading."
        )


def running_swap(lock_path: str) -> dict | None:
    """The swap holding the lock now (what its lock file says), or None."""
    try:
        handle = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            with open(lock_path) as text:
                try:
                    return json.loads(text.read() or "{}")
                except ValueError:
                    return {}
        return None
    finally:
        os.close(handle)


def refusal(lock_path: str, holder: dict) -> str:
    return (
        f"A swap is running on this server now: to {holder.get('unit', '?')} from {holder.get('previous') or 'nothing'}, "
        f"begun {holder.get('began', '?')} (pid {holder.get('pid', '?')}), at step: {holder.get('step', '?')}. "
        f"It finishes on its own; deploy again once it has (playbooks/status.yml shows the result). Lock: {lock_path}."
    )
