#!/usr/bin/python
"""Ansible module: a one-box swap as one unit of work on the host, which finishes whatever the controller does."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_swap
short_description: Swap the serving SGLang layout on this host, and roll back on the host if it fails
description:
  - Stops and disables the other layouts, waits until their GPUs are free, starts the new layout, waits until
    it generates, enables it, writes the record of what serves and measures the GPU memory it holds; when any
    step fails, reads the failed start's journal, stops and disables it, puts back the serving unit's previous
    file, and starts, waits for, enables and records the previous layout.
  - Run it with async and poll 0 (roles/sglang_service/tasks/swap_on_host.yml) so that it runs detached on the
    host; a controller killed or interrupted mid-swap leaves the swap to finish here.
  - Holds an exclusive lock for its whole run; a second swap on the same server is refused while it runs, with
    what runs (sglang_units refuses one before anything changes). A reader's shared lock (status, sglang_units)
    is waited out for up to 2 s, so a look at that moment does not pass for a running swap.
  - It always exits successfully when the swap ran; the outcome says what happened, the caller fails the run.
options:
  unit:
    description: The new layout's unit.
    type: str
    required: true
  unit_path:
    description: The new layout's unit file (already written).
    type: str
    default: ""
  others:
    description: The server's other layout units, stopped and disabled first.
    type: list
    elements: str
    default: []
  restart:
    description: The new unit is the one running now (its file changed), so it is restarted.
    type: bool
    default: false
  previous:
    description: The unit to return to when the new one fails ('' when nothing served).
    type: str
    default: ""
  previous_file:
    description: The serving unit's file before it was rewritten, put back on rollback ('' when not rewritten).
    type: str
    default: ""
  record:
    description: The record of what serves once the new layout does (the fact's JSON content).
    type: dict
    default: {}
  previous_record:
    description: The record to write when the previous layout serves again.
    type: dict
    default: {}
  fact_path:
    description: Where the record lives (a local fact).
    type: str
    default: ""
  url:
    description: The health URL (/health_generate).
    type: str
    default: ""
  gpus:
    description: The layout's GPU indices, comma-separated.
    type: str
    default: ""
  gpu_free_timeout:
    description: Seconds to wait for the stopped layouts to leave the GPUs.
    type: int
    default: 120
  health_timeout:
    description: Seconds to wait for a layout to generate.
    type: int
    default: 1800
  interval:
    description: Seconds between polls.
    type: float
    default: 1.0
  journal_lines:
    description: Lines of a failed start's journal returned for the diagnosis.
    type: int
    default: 80
  lock_path:
    description: The lock file that keeps two swaps of one server apart.
    type: path
    required: true
author: sglang-layouts project
"""

EXAMPLES = r"""
- name: Swap to ep8 on the host
  sglang_swap:
    unit: sglang-k26-ep8.service
    unit_path: /etc/systemd/system/sglang-k26-ep8.service
    others: [sglang-k26-tp8.service]
    previous: sglang-k26-tp8.service
    url: http://127.0.0.1:30001/health_generate
    gpus: "0,1,2,3,4,5,6,7"
    lock_path: /run/lock/sglang_service.swap.lock
  async: 4000
  poll: 0
"""

RETURN = r"""
outcome:
  description: swapped, rolled_back (the previous layout serves again), rollback_failed, or failed (nothing served before).
  type: str
  returned: always
steps:
  description: The steps taken, each with seconds since the swap began.
  type: list
  returned: always
health:
  description: >-
    The new layout's wait (elapsed, load_s, restarted) when it became healthy; startup, the seconds from the
    unit's start to the end of each phase SGLang logged (weights_loaded, kv_cache_sized, graphs_captured,
    ready; those it logged); and gpu_used_mib, the GPU memory held on its GPUs then (null without nvidia-smi
    or when it could not be read).
  type: dict
  returned: when swapped
failure:
  description: Why the new layout failed (msg, outcome, unit_state; holders when the GPUs stayed held).
  type: dict
  returned: unless swapped
journal:
  description: The failed start's journal (its own invocation, systemd's lines included).
  type: str
  returned: unless swapped
rollback:
  description: The return to the previous layout (elapsed; error, timed_out and journal when it failed too).
  type: dict
  returned: when there was a previous layout to return to
"""

import contextlib
import fcntl
import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_host import (
    STARTUP_JOURNAL_LINES,
    GpuHolders,
    HostError,
    gpu_indices,
    http_status,
    journal_argv,
    poll,
    refusal,
    running_swap,
    seconds_since_start,
    startup_phases,
    unhealthy_reason,
    unit_state,
    wait_healthy,
)


class Failed(Exception):
    def __init__(self, detail: dict) -> None:
        super().__init__(detail["msg"])
        self.detail = detail


class Swap:
    def __init__(self, module: AnsibleModule, lock: int) -> None:
        self.module, self.p, self.lock = module, module.params, lock
        self.began, self.began_wall = time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self.steps: list[dict] = []

    def step(self, name: str) -> None:
        """A step begins: kept for the result, and written into the lock file for a refused second swap to quote
        (in place: the lock is on this file, a replaced one would be unlocked)."""
        self.steps.append({"step": name, "at_s": round(time.monotonic() - self.began, 1)})
        said = {"pid": os.getpid(), "unit": self.p["unit"], "previous": self.p["previous"], "began": self.began_wall}
        said["step"] = name
        os.ftruncate(self.lock, 0)
        os.pwrite(self.lock, (json.dumps(said) + "\n").encode(), 0)

    def systemctl(self, *args: str) -> None:
        rc, out, err = self.module.run_command(["systemctl", *args])
        if rc != 0:
            raise HostError(f"systemctl {' '.join(args)} failed: {(err or out).strip()[:300]}")

    def journal(self, unit: str, invocation: str) -> str:
        return self.module.run_command(journal_argv(unit, invocation, self.p["journal_lines"]))[1]

    def wait(self, unit: str) -> dict:
        started = time.monotonic()
        outcome, status, state, restarts = wait_healthy(
            lambda: unit_state(self.module.run_command, unit),
            lambda: http_status(self.p["url"]),
            lambda: self.systemctl("start", unit),
            self.p["health_timeout"],
            self.p["interval"],
        )
        waited = {"elapsed": round(time.monotonic() - started, 1), "restarted": restarts, "unit_state": state}
        if outcome != "healthy":
            reason = unhealthy_reason(unit, self.p["url"], self.p["health_timeout"], outcome, status, state)
            raise Failed({"msg": reason, "outcome": outcome, "status": status, **waited})
        # Where the start went, from SGLang's own lines of this start (its journal, on the unit's clock).
        listed = journal_argv(unit, state.get("InvocationID", ""), STARTUP_JOURNAL_LINES, output="short-monotonic")
        phases = startup_phases(self.module.run_command(listed)[1], state.get("ExecMainStartTimestampMonotonic", ""))
        return {**waited, "load_s": seconds_since_start(state), "startup": phases}

    def record(self, content: dict) -> None:
        """The record of what serves, whole or not at all; a full disk leaves the old one and says so."""
        if self.p["fact_path"] and content:
            try:
                write_atomically(self.p["fact_path"], json.dumps(content, indent=4, sort_keys=True) + "\n", 0o644)
            except OSError as exc:
                raise HostError(f"could not write the record {self.p['fact_path']}: {exc}") from exc

    def forward(self) -> dict:
        unit = self.p["unit"]
        self.step("stop the other layouts")
        for other in self.p["others"]:
            self.systemctl("stop", other)
            self.systemctl("disable", other)
        smi = self.module.get_bin_path("nvidia-smi")
        if smi and self.p["gpus"]:
            self.step("wait until the GPUs are free")
            gpus = GpuHolders(self.module.run_command, smi, gpu_indices(self.p["gpus"]), [unit])
            holders = gpus.wait_free(self.p["gpu_free_timeout"], self.p["interval"])
            if holders:
                why = gpus.still_held(holders, self.p["gpu_free_timeout"])
                raise Failed({"msg": why, "outcome": "timeout", "holders": holders})
        self.step(f"start {unit}")
        self.systemctl("daemon-reload")
        self.systemctl("restart" if self.p["restart"] else "start", unit)
        self.step(f"wait until {unit} generates")
        health = self.wait(unit)
        self.step(f"enable {unit} and record it")
        self.systemctl("enable", unit)
        self.record(self.p["record"])
        return {**health, "gpu_used_mib": self.gpu_used_mib(smi)}

    def gpu_used_mib(self, smi: str | None) -> int | None:
        """What the serving layout holds on its GPUs (a figure for the caller: never a reason to fail the swap)."""
        if not smi or not self.p["gpus"]:
            return None
        try:
            holders = GpuHolders(self.module.run_command, smi, gpu_indices(self.p["gpus"]), []).now()
        except (HostError, ValueError):
            return None
        return sum(h["used_mib"] for h in holders)

    def restore_unit_file(self) -> None:
        """The unit file as it was before this swap rewrote it, and systemd told."""
        if self.p["previous_file"] and self.p["unit_path"]:
            try:
                write_atomically(self.p["unit_path"], self.p["previous_file"], 0o644)
            except OSError as exc:
                raise HostError(f"could not restore the unit file {self.p['unit_path']}: {exc}") from exc
        self.systemctl("daemon-reload")

    def back(self, failure: Failed) -> dict:
        """The failed start's journal, the failed unit stopped and disabled, the previous layout again."""
        unit, previous = self.p["unit"], self.p["previous"]
        self.step(f"read why {unit} failed")
        invocation = unit_state(self.module.run_command, unit).get("InvocationID", "")
        result = {"failure": failure.detail, "journal": "" if "holders" in failure.detail else self.journal(unit, invocation)}
        self.step(f"stop and disable {unit}")
        with contextlib.suppress(HostError):
            self.systemctl("stop", unit)
        with contextlib.suppress(HostError):
            self.systemctl("disable", unit)
        if not previous:
            with contextlib.suppress(HostError):
                self.restore_unit_file()
            return {**result, "outcome": "failed"}
        self.step(f"start {previous} again")
        try:
            self.restore_unit_file()
            self.systemctl("start", previous)
            self.systemctl("enable", previous)
            self.step(f"wait until {previous} generates again")
            health = self.wait(previous)
        except (Failed, HostError) as again:
            detail = again.detail if isinstance(again, Failed) else {"msg": str(again), "outcome": "error"}
            invocation = unit_state(self.module.run_command, previous).get("InvocationID", "")
            rollback = {
                "error": detail["msg"],
                "timed_out": detail["outcome"] == "timeout",
                "journal": self.journal(previous, invocation),
            }
            self.step(f"stop and disable {previous}, which did not come back")
            for verb in ("stop", "disable"):
                with contextlib.suppress(HostError):
                    self.systemctl(verb, previous)
            return {**result, "outcome": "rollback_failed", "rollback": rollback}
        self.step(f"record {previous}")
        rolled_back = {**result, "outcome": "rolled_back", "rollback": {"elapsed": health["elapsed"]}}
        try:
            self.record(self.p["previous_record"])
        except HostError as unwritten:  # the record on disk is the one from before this swap: it still holds
            rolled_back["rollback"]["record_error"] = str(unwritten)
        return rolled_back

    def run(self) -> dict:
        try:
            return {"outcome": "swapped", "health": self.forward()}
        except (Failed, HostError) as failure:
            detail = failure if isinstance(failure, Failed) else Failed({"msg": str(failure), "outcome": "error"})
            return self.back(detail)


# A reader (sglang_units, status, a probe) holds a shared lock for milliseconds; a swap holds it for minutes.
LOCK_WAIT_S = 2.0


def lock_exclusively(handle: int, wait: float = LOCK_WAIT_S) -> bool:
    """The swap's exclusive lock, retried for `wait` seconds so that a reader looking at that moment does not
    pass for a running swap; False when another swap holds it still."""

    def take() -> bool:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    return poll(take, bool, wait, 0.02)


def write_atomically(path: str, content: str, mode: int) -> None:
    """The whole new file or the old one, never a part (a record read by status, a unit read by systemd)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".sglang-")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "unit_path": {"type": "str", "default": ""},
            "others": {"type": "list", "elements": "str", "default": []},
            "restart": {"type": "bool", "default": False},
            "previous": {"type": "str", "default": ""},
            "previous_file": {"type": "str", "default": ""},
            "record": {"type": "dict", "default": {}},
            "previous_record": {"type": "dict", "default": {}},
            "fact_path": {"type": "str", "default": ""},
            "url": {"type": "str", "default": ""},
            "gpus": {"type": "str", "default": ""},
            "gpu_free_timeout": {"type": "int", "default": 120},
            "health_timeout": {"type": "int", "default": 1800},
            "interval": {"type": "float", "default": 1.0},
            "journal_lines": {"type": "int", "default": 80},
            "lock_path": {"type": "path", "required": True},
        },
        supports_check_mode=True,  # a swap in check mode only says whether another runs
    )
    lock_path = module.params["lock_path"]
    if module.check_mode:
        holder = running_swap(lock_path)
        if holder is not None:
            module.fail_json(msg=refusal(lock_path, holder), running=holder)
        module.exit_json(changed=False, running=None)
    os.makedirs(os.path.dirname(lock_path) or ".", exist_ok=True)
    handle = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    if not lock_exclusively(handle):
        holder = running_swap(lock_path) or {}
        module.fail_json(msg=refusal(lock_path, holder), running=holder)
    swap = Swap(module, handle)
    try:
        result = swap.run()
    finally:
        swap.steps.append({"step": "done", "at_s": round(time.monotonic() - swap.began, 1)})
        os.close(handle)  # the lock goes with it
    module.exit_json(changed=True, steps=swap.steps, **result)


if __name__ == "__main__":
    main()
