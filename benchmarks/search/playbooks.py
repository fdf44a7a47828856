"""The search's steps on the box, each an existing playbook run through ansible-runner.

The declaration is read from the inventory (ansible-inventory, into memory: nothing connects); preflight runs
playbooks/preflight.yml over every candidate at once (the host's recorded facts, no change on the
box); each launch is deploy.yml, with its swap, health wait, diagnosis and rollback.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import seam
from benchmarks.sweep import REPO, unsafe_vars_file

# What the search reads from the declaration (besides the layouts), and what makes a candidate's server.
SHARED_KEYS = ("sglang_common_args", "sglang_common_env", "sglang_model_path", "sglang_model_slug", "sglang_version")


class PlaybookError(Exception):
    """A step on the box could not run (unreachable host, missing records, bad inventory)."""


def _env() -> dict[str, str]:
    return {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}


def _run(
    playbook: str,
    inventory: Path,
    variables: dict[str, Any],
    on_event: Callable[[dict[str, Any]], None],
    cancel: Callable[[], bool] = lambda: False,
) -> Any:
    import ansible_runner

    private = Path(tempfile.mkdtemp(prefix="sglang-search-runner-"))
    try:
        vars_file = unsafe_vars_file(private / "search-vars.yml", variables)

        def handler(event: dict[str, Any]) -> bool:
            on_event(event)
            return True

        return ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(REPO),
            playbook=str(REPO / playbook),
            inventory=str(inventory),
            cmdline=f"-e @{vars_file}",
            quiet=True,
            envvars=_env(),
            event_handler=handler,
            cancel_callback=cancel,
        )
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _failure(events: list[dict[str, Any]], fallback: str) -> str:
    failed = [e for e in events if e.get("event") in ("runner_on_failed", "runner_on_unreachable")]
    if not failed:
        return fallback
    res = failed[-1].get("event_data", {}).get("res", {})
    return str(res.get("msg") or fallback).strip()[:2000]


# The names roles/sglang_service/tasks/facts.yml reads the model's config.json and safetensors index under.
MODEL_FILES = ("config", "index")


@dataclass(frozen=True)
class PreflightResult:
    verdicts: dict[str, dict[str, Any]]
    serving: str  # the layout serving before the search ('' when none)
    # What makes hosts comparable (sglang_layout.nodes.node_summary): GPUs, driver, SGLang version, model files.
    identity: dict[str, str] | None = None
    # The installed SGLang's own verdict on every candidate (sglang_args_verdict's report; {} when not asked).
    sglang: dict[str, Any] | None = None
    # The host's GPU count and whether its model takes attention data parallelism (for --layouts auto).
    host_shape: dict[str, Any] | None = None


def preflight(inventory: Path, host: str, layouts: dict[str, Any], version: str = "") -> PreflightResult:
    """Every candidate against the host's recorded facts (GPUs, installed SGLang's flag table, model files)."""
    events: list[dict[str, Any]] = []
    found: dict[str, Any] = {}

    checksums: dict[str, str] = {}

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        data = event.get("event_data", {})
        if event.get("event") != "runner_on_ok":
            return
        res = data.get("res", {})
        if str(data.get("task_action", "")).endswith(seam.PREFLIGHT_ACTION):
            found["verdicts"] = res.get("verdicts", {})
            found["host_shape"] = res.get("host_shape") or {}
        if str(data.get("task_action", "")).endswith(seam.VERDICT_ACTION):
            found["sglang"] = res.get("report") or {}
        facts = res.get("ansible_facts") or {}
        if seam.SERVING_FACT in facts:  # the role reads its own record (an instance's has its own name)
            found["serving"] = str(facts[seam.SERVING_FACT] or "")
        if isinstance(facts.get("ansible_local"), dict):
            found["local"] = facts["ansible_local"]
        if str(data.get("task_action", "")).endswith(seam.READ_FILES_ACTION):  # the model files, as the role read them
            files = res.get("files") if isinstance(res.get("files"), dict) else {}
            for name in MODEL_FILES:
                read = files.get(name) or {}
                if read.get("exists"):
                    checksums[Path(str(read.get("path", name))).name] = str(read.get("checksum", "?"))

    runner = _run(seam.PREFLIGHT, inventory, {"target": host, "sglang_layouts": layouts}, on_event)
    if "verdicts" not in found:
        raise PlaybookError(f"preflight on {host} did not run: {_failure(events, f'the playbook ended {runner.status}')}")
    identity = _identity(found.get("local") or {}, checksums, version)
    return PreflightResult(
        found["verdicts"], found.get("serving", ""), identity, found.get("sglang") or {}, found.get("host_shape") or {}
    )


def _identity(local: dict[str, Any], checksums: dict[str, str], version: str) -> dict[str, str]:
    from sglang_layout.nodes import node_summary

    installed = ((local.get(seam.VENV_FACT) or {}).get("versions") or {}).get(version) or {}
    model = ", ".join(f"{name} sha1 {digest}" for name, digest in sorted(checksums.items()))
    return node_summary(local.get(seam.GPUS_FACT) or {}, installed.get("installed_version") or version, model)


@dataclass(frozen=True)
class DeployResult:
    ok: bool
    load_s: float | None  # start to healthy; None when the layout was already serving
    message: str  # the diagnosis and rollback when it failed
    gpu_used_mib: int | None = None  # what the new layout holds on its GPUs, when nvidia-smi is there
    # Seconds from the unit's start to the end of each phase SGLang logged (weights_loaded, kv_cache_sized,
    # graphs_captured, ready): plugins/module_utils/sglang_host.py STARTUP_MARKS.
    startup: dict[str, float] = field(default_factory=dict)


def deploy(
    inventory: Path,
    host: str,
    layout: str,
    layouts: dict[str, Any],
    *,
    cancel: Callable[[], bool] = lambda: False,
    phase: Callable[[str], None] = lambda _: None,
) -> DeployResult:
    """deploy.yml -e layout=NAME on `host` (every node, comma-separated, for a multi-node layout), with the
    candidates declared beside the layouts."""
    events: list[dict[str, Any]] = []
    said: set[str] = set()

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        action = str(event.get("event_data", {}).get("task_action", ""))
        # The load begins with the host-side swap's follow-up (one box) or the controller's health wait (nodes).
        loading = action.endswith((seam.WAIT_ACTION, seam.FOLLOW_ACTION))
        if event.get("event") == "playbook_on_task_start" and loading and not said:
            said.add("loading")
            phase("loading")

    variables = {"target": host, "layout": layout, "sglang_layouts": layouts}
    runner = _run(seam.DEPLOY, inventory, variables, on_event, cancel)
    stats: dict[str, Any] = {}
    for event in events:
        if event.get("event") == "playbook_on_stats":
            stats = event.get("event_data", {}).get("artifact_data") or {}
    # A layout over several nodes is deployed on all of them (host "a,b"); rank 0's swap says how it went.
    swap = (stats.get(seam.SWAPS) or {}).get(host.split(",")[0]) or {}
    if runner.status == "successful":
        load = swap.get("load_s")
        swapped = str(swap.get("swapped")).lower() == "true"
        used = swap.get("gpu_used_mib")
        phases = swap.get("startup") if swapped and isinstance(swap.get("startup"), dict) else {}
        return DeployResult(
            True,
            float(load) if swapped and load not in (None, "") else None,
            "",
            int(used) if swapped and str(used).isdigit() else None,
            {str(phase): float(seconds) for phase, seconds in phases.items() if isinstance(seconds, (int, float))},
        )
    return DeployResult(False, None, _failure(events, f"deploy.yml ended {runner.status}"))
