"""Stored runs side by side: one row per layout (its latest run), as a terminal table, Markdown and a PNG."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchmarks import gpu_telemetry, repeats, results
from benchmarks.workload import level_load, level_name
from sglang_layout import tables, text

COLUMNS = (
    "host",
    "layout",
    "run",
    "tok/s at C=1",
    "peak agg tok/s",
    "at",
    "TTFT p50 at peak ms",
    "ITL p50 at peak ms",
    "held back at peak",
    "status",
)


def summarize_run(path: Path, run: dict[str, Any]) -> dict[str, Any]:
    """The figures that decide between layouts, from one stored run."""
    good = [level for level in run.get("levels", []) if level.get("status") in ("ok", "partial") and level.get("completed")]
    one = next((level for level in good if level["concurrency"] == 1), None)
    peak = max(good, key=lambda level: level["aggregate_tok_s"], default=None)
    server = run.get("server") or {}
    return {
        # Names come from files anyone may have written: shown escaped in the terminal and the Markdown.
        "host": text.printable(server.get("host") or path.parent.parent.name),
        "layout": text.printable(server.get("layout") or path.parent.name),
        "run": text.printable(path.stem),
        "c1_tok_s": one["decode_tok_s"]["p50"] if one else None,
        "peak_tok_s": peak["aggregate_tok_s"] if peak else None,
        "peak_c": level_name(peak) if peak else None,
        "peak_ttft_ms": peak["ttft_ms"]["p50"] if peak else None,
        "peak_itl_ms": peak["itl_ms"]["p50"] if peak else None,
        "held_back": text.printable((peak or {}).get("bottleneck", {}).get("name", "-")) if peak else "-",
        "gpu_curve": [
            (level_load(level), figures["sm_busiest"], figures["pcie_mb_s"])
            for level in good
            if (figures := gpu_telemetry.headline(level.get("gpus")))
        ],
        "status": text.printable(run.get("status", "?")),
        "c1_ci": ((one or {}).get("repeats") or {}).get("decode_tok_s_p50", {}).get("ci95"),
        "peak_ci": ((peak or {}).get("repeats") or {}).get("aggregate_tok_s", {}).get("ci95"),
        "curve": [(level_load(level), level["aggregate_tok_s"], level["decode_tok_s"]["p50"]) for level in good],
        "open_loop": any(level.get("arrival") for level in good),
    }


def latest_per_layout(
    runs: list[tuple[Path, dict[str, Any]]], skipped: list[tuple[Path, str]] | None = None
) -> list[dict[str, Any]]:
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for path, run in runs:  # oldest first, so later runs replace earlier ones
        try:
            row = summarize_run(path, run)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if skipped is not None:
                skipped.append((path, f"a run record without the expected figures ({type(exc).__name__}: {exc})"))
            continue
        latest[(row["host"], row["layout"])] = row
    return sorted(latest.values(), key=lambda row: -(row["peak_tok_s"] or 0))


def _cells(row: dict[str, Any]) -> list[str]:
    num = tables.number
    return [
        row["host"],
        row["layout"],
        row["run"],
        num(row["c1_tok_s"]) + _half_width(row["c1_ci"]),
        num(row["peak_tok_s"]) + _half_width(row["peak_ci"]),
        str(row["peak_c"] or "-"),
        num(row["peak_ttft_ms"]),
        num(row["peak_itl_ms"], 2),
        row.get("held_back", "-"),
        row["status"],
    ]


def _half_width(ci: list[float] | None) -> str:
    return "" if not ci else f" ±{(ci[1] - ci[0]) / 2:,.1f}"


def verdict(rows: list[dict[str, Any]], figure: str, what: str) -> str:
    """Which layout is best at one figure, and whether it is clearly so (95% intervals apart, from --repeats)."""
    ranked = sorted((row for row in rows if row[f"{figure}_tok_s"]), key=lambda row: -row[f"{figure}_tok_s"])
    if len(ranked) < 2:
        return ""
    best, next_ = ranked[0], ranked[1]
    head = (
        f"best {what}: {best['layout']} ({best[f'{figure}_tok_s']:,.1f}) over {next_['layout']} ({next_[f'{figure}_tok_s']:,.1f})"
    )
    if not (best[f"{figure}_ci"] and next_[f"{figure}_ci"]):
        return head + ": single runs, no intervals (measure with --repeats 3 or more to call a winner)"
    if repeats.separated(best[f"{figure}_ci"], next_[f"{figure}_ci"]):
        return head + ": clear (95% intervals apart)"
    return head + ": no clear winner (95% intervals overlap)"


def table(rows: list[dict[str, Any]]) -> str:
    return tables.text_table(COLUMNS, [_cells(row) for row in rows])


def markdown(rows: list[dict[str, Any]]) -> str:
    return tables.markdown_table(COLUMNS, [_cells(row) for row in rows])


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Aggregate tok/s vs concurrency (log-2 x axis), and per-request tok/s vs aggregate tok/s; a line per layout.
    With GPU telemetry, below them: the busiest GPU's SM busy % and PCIe traffic by concurrency."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    telemetry = [row for row in rows if row.get("gpu_curve")]
    figure, panels = plt.subplots(2 if telemetry else 1, 2, figsize=(12, 9 if telemetry else 4.5), squeeze=False)
    (left, right) = panels[0]
    for row in rows:
        if not row["curve"]:
            continue
        load, aggregate, per_request = zip(*row["curve"], strict=True)
        label = f"{row['layout']} ({row['host']})" + (" open loop" if row.get("open_loop") else "")
        left.plot(load, aggregate, marker="o", label=label)
        right.plot(aggregate, per_request, marker="o", label=label)
    left.set_xscale("log", base=2)
    open_loop = any(row.get("open_loop") for row in rows)
    left.set(
        xlabel="concurrency (requests in flight)" + (", or request rate (/s) open loop" if open_loop else ""),
        ylabel="aggregate output tok/s",
        title="Throughput by load",
    )
    right.set(xlabel="aggregate output tok/s", ylabel="per-request decode tok/s (p50)", title="Speed per user vs throughput")
    axes = [left, right]
    if telemetry:
        sm_axis, pcie_axis = panels[1]
        for row in telemetry:
            load, sm, pcie = zip(*row["gpu_curve"], strict=True)
            sm_axis.plot(load, sm, marker="o", label=f"{row['layout']} ({row['host']})")
            pcie_axis.plot(load, pcie, marker="o", label=f"{row['layout']} ({row['host']})")
        sm_axis.set(xlabel="concurrency", ylabel="SM busy % (busiest GPU, median)", title="What the GPUs did")
        pcie_axis.set(xlabel="concurrency", ylabel="PCIe rx+tx MB/s (busiest GPU, median)", title="PCIe traffic")
        for axis in (sm_axis, pcie_axis):
            axis.set_xscale("log", base=2)
        axes += [sm_axis, pcie_axis]
    for axis in axes:
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    partial = path.with_name(f".partial-{path.name}")
    figure.savefig(partial, dpi=120, format="png")
    plt.close(figure)
    partial.replace(path)


def command_compare(paths: list[Path], *, markdown_path: Path | None = None, plot_path: Path | None = None) -> int:
    skipped: list[tuple[Path, str]] = []
    try:
        runs = results.load_records(paths, skipped)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = latest_per_layout(runs, skipped)
    for path, why in skipped:
        print(f"skipped {path}: {why}", file=sys.stderr)
    if not rows:
        print(f"no benchmark runs under {', '.join(map(str, paths))}: run `python -m benchmarks run` first", file=sys.stderr)
        return 2
    print(table(rows))
    for figure, what in (("c1", "tok/s at C=1"), ("peak", "peak aggregate tok/s")):
        line = verdict(rows, figure, what)
        if line:
            print(line)
    if markdown_path:
        markdown_path.write_text(markdown(rows))
        print(f"markdown: {markdown_path}")
    if plot_path:
        plot(rows, plot_path)
        print(f"plot: {plot_path}")
    return 0
