"""`python -m benchmarks run | compare`: measure an endpoint's layouts, store the runs, put them side by side."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import compare, harness, report, results
from benchmarks.endpoint import EndpointError, check_url, probe
from benchmarks.sweep import REPO, run_sweep
from benchmarks.workload import Workload

DEFAULT_LEVELS = "1,2,4,8,16,32,64,128,256"


def _bounded(low: int, high: int, *, kind: type = int) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` within [low, high], or a message naming the bounds."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from exc
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be from {low} to {high}")
        return value

    return parse


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--levels {text!r}: give whole numbers separated by commas, e.g. 1,16,64") from exc
    if not levels or any(not 1 <= level <= 100_000 for level in levels):
        raise argparse.ArgumentTypeError(f"--levels {text!r}: every concurrency must be from 1 to 100000")
    return levels


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="one concurrency sweep against one endpoint")
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="the server's base URL, e.g. http://10.0.0.5:30001")
    where.add_argument("--server-host", help="an inventory host: benchmark its active layout")
    run.add_argument("--inventory", type=Path, default=REPO / "inventory" / "hosts.yml")
    run.add_argument("--loadgen", default="localhost", help="the inventory host that runs Locust (default: here)")
    run.add_argument("--levels", type=_levels, default=_levels(DEFAULT_LEVELS), help=f"concurrencies (default {DEFAULT_LEVELS})")
    run.add_argument("--endpoint", choices=["chat", "generate"], default="chat")
    run.add_argument("--model", default="default", help="model name sent to the OpenAI endpoint")
    run.add_argument("--input-tokens", type=_bounded(1, 1_000_000), default=128)
    run.add_argument("--output-tokens", type=_bounded(1, 1_000_000), default=256)
    run.add_argument(
        "--rounds", type=_bounded(1, 10_000), default=4, help="measured requests per level = max(--min-requests, rounds x C)"
    )
    run.add_argument("--min-requests", type=_bounded(1, 1_000_000), default=16)
    run.add_argument(
        "--warmup", type=_bounded(-1, 1_000_000), default=-1, help="requests excluded first (default -1: one per user)"
    )
    run.add_argument("--seed", type=_bounded(0, 2**31 - 1), default=0)
    run.add_argument(
        "--vocab-size",
        type=_bounded(32, 100_000_000),
        default=32000,
        help="--endpoint generate: prompt token ids are drawn below this; set the model's vocab_size",
    )
    run.add_argument("--level-timeout", type=_bounded(1, 86_400), default=600, help="seconds a level may run at most")
    run.add_argument("--processes", type=_bounded(1, 256), default=1, help="load-generator processes (Locust --processes)")
    run.add_argument(
        "--metrics-interval", type=_bounded(0, 3600, kind=float), default=1.0, help="seconds between /metrics samples (0: off)"
    )
    run.add_argument(
        "--api-key",
        default="",
        help="the server's API key; prefer $SGLANG_API_KEY or --api-key-file, which keep it off this process's command line",
    )
    run.add_argument("--api-key-file", type=Path, help="a file holding the server's API key")
    run.add_argument("--layout", default="", help="label of the layout when --url is used (default: from the server)")
    run.add_argument("--results-dir", type=Path, default=REPO / "results")
    harness.add_arguments(sub.add_parser("harness", help="benchmark the load generator itself (tokens per CPU-second, fidelity)"))
    cmp = sub.add_parser("compare", help="layouts side by side from stored runs")
    cmp.add_argument("paths", nargs="*", type=Path, default=[REPO / "results"])
    cmp.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    cmp.add_argument("--plot", type=Path, help="also draw the PNG plot here")
    return parser


def project_commit() -> str:
    git = ["git", "-C", str(REPO), "describe", "--always", "--dirty"]
    done = subprocess.run(git, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def api_key(args: argparse.Namespace) -> str:
    """The key from --api-key, --api-key-file or $SGLANG_API_KEY (in that order)."""
    if args.api_key:
        return args.api_key
    if args.api_key_file:
        try:
            return args.api_key_file.read_text().strip()
        except OSError as exc:
            raise EndpointError(f"--api-key-file {args.api_key_file}: {exc.strerror or exc}") from exc
    return os.environ.get("SGLANG_API_KEY", "")


def command_run(args: argparse.Namespace) -> int:
    workload = Workload(levels=args.levels, endpoint=args.endpoint, model=args.model, input_tokens=args.input_tokens,
                        output_tokens=args.output_tokens, seed=args.seed, vocab_size=args.vocab_size, warmup=args.warmup,
                        rounds=args.rounds,
                        min_requests=args.min_requests, level_timeout=args.level_timeout,
                        metrics_interval=args.metrics_interval, processes=args.processes)  # fmt: skip
    record: dict[str, Any] = {"kind": "sglang-benchmark-run", "started": results.utc_stamp(), "commit": project_commit(),
                              "workload": {k: v for k, v in vars(workload).items()}, "endpoint": args.url or "",
                              "server_host": args.server_host or ""}  # fmt: skip
    host, layout = args.server_host or "", args.layout
    try:
        key = api_key(args)
        if args.url:
            url = check_url(args.url)
            host = host or (url.split("//", 1)[1].replace(":", "_"))
            info = probe(url, key)
            record["server"] = {"url": url, "sglang_version": info.get("version"), "server_args": info}
            layout = layout or _layout_from_info(info)
            print(f"benchmarking {url} ({layout}), levels {','.join(map(str, args.levels))}", flush=True)
            sweep = run_sweep(workload, url=url, inventory=args.inventory, loadgen=args.loadgen, api_key=key)
        else:
            print(f"benchmarking the active layout of {args.server_host}, levels {','.join(map(str, args.levels))}", flush=True)
            sweep = run_sweep(workload, server_host=args.server_host, inventory=args.inventory, loadgen=args.loadgen,
                              api_key=key)  # fmt: skip
            record["server"] = sweep.server
            layout = layout or sweep.server.get("layout", "")
    except EndpointError as exc:
        record.update(status="failed", error=str(exc), levels=[])
        path = results.save_record(record, args.results_dir, host or "unknown", layout or "unknown")
        print(f"error: {exc}\nrecorded as failed: {path}", file=sys.stderr)
        return 2
    record.update(status=sweep.status, error=sweep.error, levels=sweep.levels, finished=results.utc_stamp())
    path = results.save_record(record, args.results_dir, host or sweep.server.get("host", "unknown"), layout or "unknown")
    print(report.level_table(sweep.levels) if sweep.levels else "no level ran")
    print(f"{sweep.status}{': ' + sweep.error if sweep.error else ''}\nsaved {path}")
    return 0 if sweep.status == "complete" else 1


def _layout_from_info(info: dict[str, Any]) -> str:
    if not info:
        return "unknown"
    sizes = {key: info.get(f"{key}_size") or 1 for key in ("tp", "ep", "pp", "dp")}
    return "-".join(f"{key}{value}" for key, value in sizes.items())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        return command_run(args)
    if args.command == "harness":
        return harness.command_harness(args)
    return compare.command_compare(args.paths, markdown_path=args.markdown, plot_path=args.plot)
