"""The harness's results as text tables: closed-loop scenarios by client, and the open-loop schedule's fidelity."""

from __future__ import annotations

from typing import Any

from sglang_layout import tables


def table(rows: list[dict[str, Any]]) -> str:
    num = tables.number
    header = ("scenario", "client", "client CPU %", "tok / CPU-s", "agg tok/s", "ITL p50 / p99 ms (true)", "req tok/s p50 (true)")
    lines = []
    for row in rows:
        itl = f"{num(row['itl_p50_ms'], 2)} / {num(row['itl_p99_ms'], 2)} ({num(row['true_itl_ms'], 0)})"
        rate = f"{num(row['decode_p50'], 2)} ({num(row['true_decode'], 2)})"
        lines.append(
            (
                row["scenario"],
                row["client"],
                num(row["client_cpu_pct"], 0),
                num(row["tok_per_cpu_s"], 0),
                num(row["aggregate_tok_s"], 0),
                itl,
                rate,
            )
        )
    return tables.text_table(header, lines)


def open_loop_table(rows: list[dict[str, Any]]) -> str:
    num = tables.number
    header = ("scenario", "client CPU %", "sent/s (schedule)", "late p50 / p99 ms", "failed / measured")
    lines = [
        (
            row["scenario"],
            num(row["client_cpu_pct"], 0),
            f"{num(row['achieved_rate'], 0)} ({num(row['planned_rate'], 0)})",
            f"{num(row['lateness_p50_ms'], 2)} / {num(row['lateness_p99_ms'], 2)}",
            f"{row['failed']} / {row['requests']}",
        )
        for row in rows
    ]
    return tables.text_table(header, lines)
