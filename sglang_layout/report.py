"""Human-readable preflight output: one line per layout, then the reasons."""

from __future__ import annotations

from collections.abc import Sequence

from sglang_layout import tables
from sglang_layout.findings import Finding
from sglang_layout.preflight import Verdict

HEADERS = ("layout", "tp", "ep", "pp", "dp", "GPUs", "MoE TP", "weights/GPU", "usable/GPU", "headroom", "KV tokens", "verdict")


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} GiB"


def table_rows(verdicts: Sequence[Verdict]) -> list[tuple[str, ...]]:
    rows = []
    for v in verdicts:
        fit = v.fit
        verdict = "ok" if v.ok else "REJECTED (" + ", ".join(sorted({f.rule for f in v.errors})) + ")"
        if v.ok and v.warnings:
            verdict = "ok, " + ", ".join(sorted({f.rule for f in v.warnings})) + " warning"
        rows.append(
            (
                v.layout.name,
                str(v.layout.tp),
                str(v.layout.ep),
                str(v.layout.pp),
                str(v.layout.dp),
                str(v.layout.gpus_used)
                if v.layout.nnodes == 1
                else f"{v.layout.gpus_used} ({v.layout.nnodes}x{v.layout.gpus_per_node})",
                str(v.moe_tp_width),
                _gib(fit.weights_per_gpu_gib if fit else None),
                _gib(fit.usable_per_gpu_gib if fit else None),
                _gib(fit.headroom_gib if fit else None),
                f"{fit.kv_tokens:,}" if fit else "-",
                verdict,
            )
        )
    return rows


def format_table(verdicts: Sequence[Verdict]) -> str:
    return tables.text_table(HEADERS, table_rows(verdicts))


def format_reasons(verdicts: Sequence[Verdict], *, include_info: bool = False) -> str:
    """One line per finding; one that every layout shares (the bind address, say) is said once."""
    shown = [(v.layout.name, f) for v in verdicts for f in v.findings if include_info or f.severity != "info"]
    holders: dict[str, set[str]] = {}
    for name, finding in shown:
        holders.setdefault(finding.text(), set()).add(name)
    shared = {line for line, names in holders.items() if len(verdicts) > 1 and len(names) == len(verdicts)}
    first: dict[str, Finding] = {}
    for _, finding in shown:
        first.setdefault(finding.text(), finding)
    lines = [f"all layouts: {first[line].severity}: {line}" for line in first if line in shared]
    lines += [f"{name}: {finding.severity}: {finding.text()}" for name, finding in shown if finding.text() not in shared]
    skipped = dict.fromkeys(what for v in verdicts for what in v.skipped)
    lines += [f"not checked: {what}" for what in skipped]
    return "\n".join(lines)


def format_report(verdicts: Sequence[Verdict]) -> str:
    reasons = format_reasons(verdicts)
    return format_table(verdicts) + ("\n\n" + reasons if reasons else "")
