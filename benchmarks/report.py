"""Terminal tables of a sweep's levels."""

from __future__ import annotations

from typing import Any

from benchmarks import bottleneck, gpu_telemetry
from benchmarks.workload import level_name
from sglang_layout import tables
from sglang_layout.tables import number

LEVEL_HEADER = (
    *("level", "status", "done/fail", "agg tok/s", "req tok/s p50", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms"),
    *("ITL p99 ms", "E2E p50 ms", "conc", "server tok/s", "client cpu %"),
)


def _level_row(level: dict[str, Any]) -> tuple[str, ...]:
    if level["status"] in ("failed", "hung") and "decode_tok_s" not in level:
        return (level_name(level), level["status"], f"0/{level.get('failed', 0)}", *["-"] * 10)
    server = (level.get("server_metrics") or {}).get("gen_throughput")
    return (
        level_name(level),
        level["status"],
        f"{level['completed']}/{level['failed']}",
        number(level["aggregate_tok_s"]),
        number(level["decode_tok_s"]["p50"]),
        number(level["ttft_ms"]["p50"]),
        number(level["ttft_ms"]["p99"]),
        number(level["itl_ms"]["p50"], 2),
        number(level["itl_ms"]["p99"], 2),
        number(level["e2e_ms"]["p50"], 0),
        number(level["achieved_concurrency"], 1),
        number(server),
        _client_cpu(level),
    )


def _level_notes(levels: list[dict[str, Any]]) -> list[str]:
    """Under the table: client-bound levels, each level's bottleneck, open-loop rates, errors."""
    notes = [
        f"{level_name(lv)}: client-bound: a load-generator process used {100 * lv['loadgen']['busiest_cpu_fraction']:.0f}% "
        "of a core; its figures understate the server (add --processes)"
        for lv in levels
        if (lv.get("loadgen") or {}).get("client_bound") and not lv.get("bottleneck")  # else said by its bottleneck line
    ]
    notes += [f"{level_name(lv)} held back by {bottleneck.line(lv)}" for lv in levels if lv.get("bottleneck")]
    notes += [arrival_note(lv) for lv in levels if lv.get("arrival") and lv["arrival"].get("achieved_rate")]
    notes += [
        f"{level_name(lv)}: {lv.get('error') or ', '.join(lv.get('errors', []))}"
        for lv in levels
        if lv["status"] != "ok" and (lv.get("error") or lv.get("errors"))
    ]
    return notes


def level_table(levels: list[dict[str, Any]]) -> str:
    header, rows = LEVEL_HEADER, [_level_row(level) for level in levels]
    if any(level.get("gpus") for level in levels):
        header = (*header, "GPU SM %", "PCIe MB/s")
        rows = [(*row, *_gpu_cells(level)) for row, level in zip(rows, levels, strict=True)]
    notes_head = []
    if any("goodput" in level for level in levels):
        header = (*header, "good %", "good req/s", "good tok/s")
        rows = [(*row, *_goodput_cells(level)) for row, level in zip(rows, levels, strict=True)]
        bounds = next(level["goodput"]["bounds_ms"] for level in levels if "goodput" in level)
        notes_head = ["goodput bounds: " + ", ".join(f"{k} <= {v:g} ms" for k, v in bounds.items())]
    return "\n".join([tables.text_table(header, rows, right_aligned=True), *notes_head, *_level_notes(levels)])


def arrival_note(level: dict[str, Any]) -> str:
    """An open-loop level's schedule against what the client sent: rate, burstiness (CV) and lateness."""
    arrival = level["arrival"]
    late = arrival["lateness_ms"]
    return (
        f"{level_name(level)}: sent {arrival['achieved_rate']:.3g}/s (schedule {arrival['planned_rate']:.3g}/s), "
        f"gap CV {arrival['achieved_cv']:.2f} (schedule {arrival['planned_cv']:.2f}), "
        f"sent late by p50 {late['p50']:.1f} ms, p99 {late['p99']:.1f} ms"
        + ("; the load generator fell behind its schedule (add --processes)" if arrival.get("behind_schedule") else "")
    )


def _goodput_cells(level: dict[str, Any]) -> tuple[str, str, str]:
    good = level.get("goodput")
    if not good:
        return ("-", "-", "-")
    return (number(100 * good["good_fraction"]), number(good["good_request_rate"], 2), number(good["good_tok_s"]))


def _gpu_cells(level: dict[str, Any]) -> tuple[str, str]:
    """The busiest GPU's SM busy % and the largest PCIe rx+tx of one GPU, each its median over the level."""
    figures = gpu_telemetry.headline(level.get("gpus"))
    return (number(figures["sm_busiest"], 0), number(figures["pcie_mb_s"], 0)) if figures else ("-", "-")


def _client_cpu(level: dict[str, Any]) -> str:
    """The busiest load-generator process's CPU, as % of one core ('!' when it was the bottleneck)."""
    usage = level.get("loadgen")
    if not usage:
        return "-"
    return f"{100 * usage['busiest_cpu_fraction']:.0f}" + ("!" if usage["client_bound"] else "")
