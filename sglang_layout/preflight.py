"""Preflight: every rule over a layout, with the host's and the model's facts, into one verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_layout import command, defaults, flags, hardening, memory, parallel, text
from sglang_layout.findings import Finding
from sglang_layout.model_size import ModelConfigError, ModelWeights, model_weights
from sglang_layout.nodes import NodePlace
from sglang_layout.schema import Layout


@dataclass(frozen=True)
class Facts:
    """What the checks know about the host, the model and the installed SGLang."""

    gpu_count: int | None = None
    gpu_memory_gib: float | None = None
    model_config: Mapping[str, Any] | None = None
    model_index: Mapping[str, Any] | None = None
    flag_table: flags.FlagTable | None = None
    model_path: str = defaults.MODEL_PATH
    port: int = defaults.PORT
    host: str = defaults.BIND_ADDRESS
    api_key_set: bool = False
    secrets_file: str | None = None  # where the unit's --config file of secrets is read from
    dist_init_port: int = defaults.DIST_INIT_PORT
    hardening: Mapping[str, Any] = field(default_factory=dict)  # sglang_service_hardening, parsed
    gpu_power_range: tuple[float, float] | None = None  # the power limits nvidia-smi -pl accepts (W), if recorded


@dataclass(frozen=True)
class Verdict:
    layout: Layout
    argv: list[str]
    findings: list[Finding]
    fit: memory.MemoryFit | None = None
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def moe_tp_width(self) -> int:
        return parallel.moe_tp_width(self.layout)

    def summary(self) -> str:
        if self.ok:
            return "ok" if not self.warnings else "ok (warnings)"
        return "REJECTED: " + "; ".join(f.text() for f in self.errors)

    def to_dict(self) -> dict[str, Any]:
        fit = self.fit
        return {
            "layout": self.layout.name,
            "ok": self.ok,
            "gpus_used": self.layout.gpus_used,
            "nnodes": self.layout.nnodes,
            "gpus_per_node": self.layout.gpus_per_node,
            "moe_tp_width": self.moe_tp_width,
            "tp": self.layout.tp,
            "ep": self.layout.ep,
            "pp": self.layout.pp,
            "dp": self.layout.dp,
            "weights_per_gpu_gib": round(fit.weights_per_gpu_gib, 2) if fit else None,
            "usable_per_gpu_gib": round(fit.usable_per_gpu_gib, 2) if fit else None,
            "headroom_gib": round(fit.headroom_gib, 2) if fit else None,
            "kv_tokens": fit.kv_tokens if fit else None,
            "argv": self.argv,
            "findings": [f.to_dict() for f in self.findings],
            "skipped": self.skipped,
            "summary": self.summary(),
        }


def _weights(facts: Facts) -> tuple[ModelWeights | None, list[Finding]]:
    if facts.model_config is None:
        return None, []
    try:
        return model_weights(facts.model_config, facts.model_index), []
    except ModelConfigError as exc:
        return None, [Finding.warning("memory", f"memory fit not checked: {exc}")]


def check_layout(layout: Layout, facts: Facts, estimate: tuple[ModelWeights | None, list[Finding]] | None = None) -> Verdict:
    """All rules for one layout. `estimate` (weights, notes) may be passed in to estimate once for many layouts."""
    weights, notes = estimate if estimate is not None else _weights(facts)
    findings: list[Finding] = list(notes) + [Finding.warning("declaration", notice) for notice in layout.notices]
    skipped: list[str] = []
    # Every node runs this command but its rank; the flags are checked as rank 0's.
    node = NodePlace(layout.nnodes, 0, f"RANK0-ADDRESS:{facts.dist_init_port}") if layout.nnodes > 1 else None
    argv = command.server_args(
        layout, model_path=facts.model_path, port=facts.port, host=facts.host, secrets_file=facts.secrets_file, node=node
    )
    findings += check_exposure(layout, facts)
    findings += check_privileges(layout, facts)
    findings += check_power_limit(layout, facts)
    if layout.power_limit is not None and facts.gpu_power_range is None:
        skipped.append("power limit range (needs the GPU record's power limits: run playbooks/provision.yml again)")
    findings += parallel.check_parallel(layout, facts.gpu_count, weights.routed_experts if weights else None)
    fit = None
    if weights is not None and facts.gpu_memory_gib:
        fit = memory.memory_fit(weights, layout, facts.gpu_memory_gib)
        findings += memory.check_memory(fit, layout, facts.gpu_count)
    else:
        skipped.append("memory fit (needs the model's config.json and GPU memory)")
    if facts.flag_table is not None:
        findings += flags.check_argv(argv, facts.flag_table)
    else:
        skipped.append("flags (needs the installed SGLang's flag table)")
    if facts.gpu_count is None:
        skipped.append("GPU count")
    return Verdict(layout=layout, argv=argv, findings=findings, fit=fit, skipped=skipped)


def check_exposure(layout: Layout, facts: Facts) -> list[Finding]:
    """A server reachable beyond this host with no API key serves (and administers) anyone who finds the port."""
    if facts.api_key_set or text.is_loopback(facts.host):
        return []
    return [
        Finding.warning(
            "exposure",
            f"the server would listen on {facts.host}:{facts.port} with no API key: anyone who reaches the port can use it",
            "set sglang_api_key (from Ansible Vault), or sglang_bind_address: 127.0.0.1",
        )
    ]


def check_privileges(layout: Layout, facts: Facts) -> list[Finding]:
    """A capability granted to the server (only those of hardening.GRANTABLE get this far) is said every time."""
    directives = hardening.merged("/", facts.hardening, layout.hardening)
    return [
        Finding.warning(
            "privileges", f"the server is granted {cap}: {why}", "drop it from hardening when the server starts without it"
        )
        for cap, why in hardening.granted(directives).items()
    ]


def check_power_limit(layout: Layout, facts: Facts) -> list[Finding]:
    """A power limit the GPUs refuse would fail the unit's start: said before anything on the host changes."""
    if layout.power_limit is None or facts.gpu_power_range is None:
        return []
    low, high = facts.gpu_power_range
    if low <= layout.power_limit <= high:
        return []
    return [
        Finding.error(
            "power",
            f"sglang_layouts.{layout.name}.power_limit = {layout.power_limit} W is outside what nvidia-smi -pl accepts"
            f" on this host's GPUs ({low:g}-{high:g} W)",
            f"choose a power_limit from {low:g} to {high:g} W, or drop it to keep the host's own",
        )
    ]


def check_all(layouts: Mapping[str, Layout], facts: Facts) -> list[Verdict]:
    estimate = _weights(facts)
    return [check_layout(layout, facts, estimate) for layout in layouts.values()]
