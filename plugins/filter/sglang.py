"""Filters: thin adapters over sglang_layout for the provisioning roles (no logic of their own)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    import sglang_layout  # noqa: F401  (installed into the venv by bin/setup)
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sglang_layout import agreement, defaults, diagnosis, flags, gpus, instances, nodes, oracle, router, secrets, unit
from sglang_layout.errors import DeclarationError


def sglang_gpu_record(query_output: str) -> dict[str, Any]:
    """nvidia-smi --query-gpu CSV -> the GPU record preflight reads."""
    try:
        return gpus.parse_gpu_query(query_output)
    except ValueError as exc:
        raise AnsibleFilterError(f"sglang_gpu_record: {exc}") from exc


def sglang_gpu_power_range(record: dict[str, Any]) -> list[float]:
    """The GPU record -> [lowest, highest] power limit every GPU accepts, [] when it has none."""
    found = gpus.power_range(record or {})
    return list(found) if found else []


def sglang_gpu_description(record: dict[str, Any]) -> str:
    """The GPU record -> one line: count, name, memory, compute capability, PCIe link, driver."""
    return gpus.describe(record or {})


def sglang_unit_file(unit_text: str) -> dict[str, Any]:
    """One of this project's unit files -> its layout, command, node rank and number of nodes (for the record)."""
    try:
        return unit.read_unit_file(unit_text)
    except ValueError as exc:
        raise AnsibleFilterError(f"sglang_unit_file: {exc}") from exc


def sglang_oracle_lines(verdicts: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """Our preflight's verdicts and SGLang's own report -> the side-by-side lines, disagreements marked."""
    return oracle.lines(verdicts or {}, report or {})


def sglang_oracle_report(result: dict[str, Any], skipped: str) -> dict[str, Any]:
    """The sglang_args_verdict task's result -> its report, what kept it from answering, or why it was not asked."""
    return oracle.outcome(result or {}, skipped)


def sglang_oracle_refusal(report: dict[str, Any], layout: str) -> str:
    """SGLang's report -> why the layout may not be deployed ('' when SGLang accepts it or was not asked)."""
    return oracle.deploy_refusal(layout, report or {})


def sglang_flag_table(help_text: str, version: str) -> dict[str, Any]:
    """`launch_server --help` text -> the flag table preflight checks rendered commands against."""
    table = flags.parse_help(help_text, version=version)
    if not table.options:
        raise AnsibleFilterError("sglang_flag_table: no options found in the --help text")
    return table.to_json()


def sglang_disagreements(state: dict[str, Any]) -> list[str]:
    """The host's units, record and health -> each disagreement, with the command that puts it right."""
    return agreement.disagreements(
        recorded_unit=str(state.get("recorded_unit") or ""),
        running=list(state.get("running") or []),
        enabled=list(state.get("enabled") or []),
        failed=list(state.get("failed") or []),
        health_status=int(state["health_status"]) if str(state.get("health_status") or "").isdigit() else None,
        model_slug=str(state.get("model_slug") or ""),
        limit=str(state.get("limit") or ""),
    )


def sglang_diagnose(journal: str, timed_out: bool = False) -> dict[str, Any]:
    """A failed start's journal -> {cause, title, advice, lines, message}."""
    found = diagnosis.diagnose(journal or "", timed_out=bool(timed_out))
    return {**found.to_dict(), "message": found.message()}


def sglang_journal_argv(unit: str, invocation: str, lines: int) -> list[str]:
    """journalctl's argv for one start of a unit (its InvocationID from systemctl show), systemd's lines included:
    the host-side helper the modules use, so that both read a start the same way."""
    return _host_helpers().journal_argv(unit, invocation or "", int(lines))


def _host_helpers() -> ModuleType:
    """plugins/module_utils/sglang_host.py (Ansible imports it into modules only; a filter loads it by path)."""
    path = Path(__file__).resolve().parents[1] / "module_utils" / "sglang_host.py"
    spec = importlib.util.spec_from_file_location("sglang_host", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sglang_local_url(bind_address: str, port: Any, path: str = "") -> str:
    """The server's URL from its own host (a wildcard bind address is reached on loopback)."""
    return defaults.local_url(str(bind_address or ""), port, path)


def sglang_pip_environment(
    index_url: str = "",
    extra_index_urls: list[str] | None = None,
    find_links: list[str] | None = None,
    no_index: bool = False,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """pip's environment for a pinned install from the configured index: quiet, and offline when no_index."""
    environment = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    if index_url:
        environment["PIP_INDEX_URL"] = index_url
    if extra_index_urls:
        environment["PIP_EXTRA_INDEX_URL"] = " ".join(extra_index_urls)
    if find_links:
        environment["PIP_FIND_LINKS"] = " ".join(find_links)
    if no_index:
        environment["PIP_NO_INDEX"] = "1"
    return {**environment, **(extra or {})}


def sglang_uv_source_args(
    index_url: str = "",
    extra_index_urls: list[str] | None = None,
    find_links: list[str] | None = None,
    no_index: bool = False,
) -> list[str]:
    """The same sources as sglang_pip_environment, as `uv pip install` options (uv reads no PIP_* variable)."""
    args = ["--index-url", index_url] if index_url else []
    for url in extra_index_urls or []:
        args += ["--extra-index-url", url]
    for link in find_links or []:
        args += ["--find-links", link]
    return [*args, "--no-index"] if no_index else args


def sglang_secret_problems(values: dict[str, Any]) -> list[str]:
    """What is wrong with the declared secrets, never echoing them (for an assert)."""
    return secrets.problems(values)


def sglang_secrets_config(values: dict[str, Any]) -> str:
    """The secrets as SGLang's --config YAML (use only in a no_log task)."""
    try:
        return secrets.config_yaml(values)
    except ValueError as exc:
        raise AnsibleFilterError(f"sglang_secrets_config: {exc}") from exc


def sglang_router_unit(settings: dict[str, Any]) -> dict[str, Any]:
    """The router's settings -> its unit (name, ExecStart, sandbox lines), or a message naming the field."""
    try:
        return router.router_unit(**settings)
    except (DeclarationError, TypeError) as exc:
        raise AnsibleFilterError(f"sglang_router_unit: {exc}") from exc


def sglang_node_span(layouts: dict[str, Any], layout: str, groups: dict[str, list[str]], host: str) -> dict[str, Any]:
    """The hosts a layout runs on in rank order ({nnodes, hosts}); one-box layouts run on `host` alone."""
    try:
        hosts = nodes.layout_span(layouts if isinstance(layouts, dict) else {}, layout, groups, host)
        return {"nnodes": len(hosts), "hosts": hosts}
    except DeclarationError as exc:
        raise AnsibleFilterError(f"{exc}. Nothing was changed.") from exc


def sglang_instance_name(raw: Any) -> str:
    """sglang_instance -> '' (the whole machine) or the checked instance name."""
    try:
        return instances.instance_name(raw)
    except DeclarationError as exc:
        raise AnsibleFilterError(f"{exc}. Nothing was changed.") from exc


def sglang_service_fact(instance: str) -> str:
    """The local fact that records what an instance (or the whole machine, '') serves."""
    return instances.fact_name(instance)


def sglang_unit_pattern(instance: str) -> str:
    """The file names of an instance's units, as a regular expression."""
    return instances.unit_pattern(instance)


def sglang_gpu_slice(raw: Any, gpu_count: int) -> list[int]:
    """sglang_gpu_ids -> the instance's GPU indices (every GPU of the machine when unset)."""
    try:
        return instances.gpu_slice(raw, int(gpu_count))
    except DeclarationError as exc:
        raise AnsibleFilterError(f"{exc}. Nothing was changed.") from exc


def sglang_instance_conflicts(hostvars: Any, hosts: list[str]) -> list[str]:
    """What server entries on one machine would fight over (whole machine, instance name, port, GPUs)."""
    return instances.conflicts({host: hostvars[host] for host in hosts}, list(hosts))


def sglang_first_on_machine(host: str, hostvars: Any, hosts: list[str]) -> bool:
    """Whether `host` is the first of `hosts` on its machine."""
    return instances.first_on_machine({h: hostvars[h] for h in hosts}, list(hosts), host)


def sglang_node_differences(summaries: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Each node's {gpus, sglang_version, model_digest} -> {problems, notes}: what differs between them."""
    found = {
        host: nodes.node_summary(facts.get("gpus") or {}, facts.get("sglang_version"), facts.get("model_digest"))
        for host, facts in summaries.items()
    }
    problems, notes = nodes.differences(found)
    return {"problems": problems, "notes": notes}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_gpu_record": sglang_gpu_record,
            "sglang_unit_file": sglang_unit_file,
            "sglang_gpu_description": sglang_gpu_description,
            "sglang_gpu_power_range": sglang_gpu_power_range,
            "sglang_flag_table": sglang_flag_table,
            "sglang_oracle_lines": sglang_oracle_lines,
            "sglang_oracle_refusal": sglang_oracle_refusal,
            "sglang_oracle_report": sglang_oracle_report,
            "sglang_diagnose": sglang_diagnose,
            "sglang_journal_argv": sglang_journal_argv,
            "sglang_local_url": sglang_local_url,
            "sglang_pip_environment": sglang_pip_environment,
            "sglang_uv_source_args": sglang_uv_source_args,
            "sglang_disagreements": sglang_disagreements,
            "sglang_secret_problems": sglang_secret_problems,
            "sglang_secrets_config": sglang_secrets_config,
            "sglang_router_unit": sglang_router_unit,
            "sglang_node_span": sglang_node_span,
            "sglang_node_differences": sglang_node_differences,
            "sglang_instance_name": sglang_instance_name,
            "sglang_service_fact": sglang_service_fact,
            "sglang_unit_pattern": sglang_unit_pattern,
            "sglang_gpu_slice": sglang_gpu_slice,
            "sglang_instance_conflicts": sglang_instance_conflicts,
            "sglang_first_on_machine": sglang_first_on_machine,
        }
