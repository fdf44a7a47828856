"""Terminal tables of a sweep's levels."""

from __future__ import annotations

from typing import Any


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def level_table(levels: list[dict[str, Any]]) -> str:
    header = ("C", "status", "done/fail", "agg tok/s", "req tok/s p50", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
              "ITL p99 ms", "E2E p50 ms", "conc", "server tok/s")  # fmt: skip
    rows = [header]
    for level in levels:
        if level["status"] == "failed" and "decode_tok_s" not in level:
            rows.append((str(level["concurrency"]), "failed", f"0/{level.get('failed', 0)}", *["-"] * 9))
            continue
        server = (level.get("server_metrics") or {}).get("gen_throughput")
        rows.append((
            str(level["concurrency"]), level["status"], f"{level['completed']}/{level['failed']}",
            _fmt(level["aggregate_tok_s"]), _fmt(level["decode_tok_s"]["p50"]), _fmt(level["ttft_ms"]["p50"]),
            _fmt(level["ttft_ms"]["p99"]), _fmt(level["itl_ms"]["p50"], 2), _fmt(level["itl_ms"]["p99"], 2),
            _fmt(level["e2e_ms"]["p50"], 0), _fmt(level["achieved_concurrency"], 1), _fmt(server),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    notes = [f"C={lv['concurrency']}: {lv.get('error') or ', '.join(lv.get('errors', []))}" for lv in levels
             if lv["status"] != "ok" and (lv.get("error") or lv.get("errors"))]  # fmt: skip
    return "\n".join(lines + notes)
