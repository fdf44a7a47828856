"""`python -m benchmarks run | search | compare | harness`: measure an endpoint's layouts, search the best one,
store the runs, put them side by side."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks import bottleneck, compare, dataset, harness, repeats, report, results, slo
from benchmarks.capacity import capacity_sentence, measure_levels
from benchmarks.endpoint import API_KEY_VARIABLE, EndpointError, check_url, probe, served_model
from benchmarks.inventory import InventoryError, read_inventory
from benchmarks.search import objectives, stages
from benchmarks.search.runner import SearchOptions, main_search
from benchmarks.sweep import LOCAL, REPO, SweepResult, parse_loadgen, run_sweep
from benchmarks.workload import Workload, bounded, parse_duration
from sglang_layout.candidates import parse_grid
from sglang_layout.errors import DeclarationError

# The search measures fewer levels by default: every level is one more pass on every candidate.
SEARCH_LEVELS = "1,4,16,64,256"


@dataclass(frozen=True)
class Command:
    """One subcommand: its options and what runs it (vLLM's sweep CLI keeps its subcommands as such a table)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handle: Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.set_defaults(environment_key="")  # `main` sets the $SGLANG_API_KEY it took out of the environment
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands():
        command.add_arguments(sub.add_parser(command.name, help=command.help))
        sub.choices[command.name].set_defaults(handle=command.handle)
    return parser


def commands() -> tuple[Command, ...]:
    return (
        Command("run", "one sweep (concurrencies or request rates) against one endpoint", _add_run, command_run),
        Command(
            "search",
            "find the best layout and flags on a box: launch each candidate once, measure, report",
            _add_search,
            command_search,
        ),
        Command(
            "harness",
            "benchmark the load generator itself (tokens per CPU-second, fidelity)",
            harness.add_arguments,
            harness.command_harness,
        ),
        Command("compare", "layouts side by side from stored runs", _add_compare, _command_compare),
    )


def _add_shared(parser: argparse.ArgumentParser, *, slo_help: str) -> None:
    """The options `run` and `search` share: where the inventory and Locust are, the key, the SLO, the results."""
    parser.add_argument("--inventory", type=Path, default=REPO / "inventory" / "hosts.yml")
    parser.add_argument(
        "--loadgen",
        "--loadgen-hosts",
        dest="loadgen",
        type=parse_loadgen,
        default="localhost",
        help="the inventory host(s) that run Locust (default: here); several, comma-separated, run Locust's master on "
        "the first and --processes workers on each (install Locust there with playbooks/loadgen.yml)",
    )
    parser.add_argument(
        "--api-key",
        default="",
        help="the server's API key; prefer $SGLANG_API_KEY or --api-key-file, which keep it off this process's command line",
    )
    parser.add_argument("--api-key-file", type=Path, help="a file holding the server's API key")
    parser.add_argument("--slo", action="append", default=[], type=_slo, metavar="METRIC_STAT=MS", help=slo_help)
    parser.add_argument("--results-dir", type=Path, default=REPO / "results")


def _add_run(run: argparse.ArgumentParser) -> None:
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="the server's base URL, e.g. http://10.0.0.5:30001")
    where.add_argument("--server-host", help="an inventory host: benchmark its active layout")
    _add_shared(
        run,
        slo_help="find the SLO capacity: levels go up until a bound breaks (e.g. tpot_p99=50, repeatable), then the "
        "highest load within every bound is bisected between the levels that bracket it",
    )
    Workload.add_cli_args(run)
    run.add_argument("--layout", default="", help="label of the layout when --url is used (default: from the server)")


def _add_compare(cmp: argparse.ArgumentParser) -> None:
    cmp.add_argument("paths", nargs="*", type=Path, default=[REPO / "results"])
    cmp.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    cmp.add_argument("--plot", type=Path, help="also draw the PNG plot here")


def _command_compare(args: argparse.Namespace) -> int:
    return compare.command_compare(args.paths, markdown_path=args.markdown, plot_path=args.plot)


def _hosts(text: str) -> str:
    """Inventory host names, comma-separated, each once (the same rule as --loadgen-hosts)."""
    try:
        return parse_loadgen(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--loadgen-hosts", "--server-hosts")) from exc


def _add_search(search: argparse.ArgumentParser) -> None:
    search.add_argument(
        "--server-host",
        "--server-hosts",
        dest="server_host",
        required=True,
        type=_hosts,
        help="the inventory host to search on; several identical ones, comma-separated, run candidates in parallel, "
        "one per host at a time (checked alike first: GPUs, SGLang version, model files)",
    )
    _add_shared(search, slo_help="a latency bound, e.g. tpot_p99=50 (repeatable): levels stop when it breaks; capacity uses it")
    search.add_argument(
        "--layouts",
        default="all",
        help="declared layouts to try, comma-separated (default: all); `auto` adds every parallel shape the host's "
        "GPUs allow (tp, ep dividing tp, pp, dp, attention dp where the model takes it), named like tp8-ep4",
    )
    search.add_argument(
        "--dry-run", action="store_true", help="judge every candidate and say what would launch; launch nothing, write nothing"
    )
    search.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="FLAG=V1,V2",
        help="server flag values to try on the layouts, e.g. max-running-requests=64,256, environment values as "
        "env.VARIABLE=V1,V2, e.g. env.NCCL_P2P_DISABLE=0,1, or speculative drafts as draft=NAME,none "
        "(sglang_draft_models) (repeatable; see --strategy)",
    )
    search.add_argument(
        "--strategy",
        choices=list(stages.STRATEGIES),
        default="",
        help="with a grid: staged (the default) ranks the layouts, varies each axis one value at a time on the best "
        "--top, then tries the best values together; grid launches every layout with every combination",
    )
    search.add_argument(
        "--top",
        type=bounded(1, 64),
        default=1,
        help="the staged search varies the axes on this many of the best layouts of each objective (default 1)",
    )
    search.add_argument(
        "--objective",
        choices=list(objectives.OBJECTIVES),
        default="peak",
        help="what the winner left serving is best at: c1 (tok/s per request at C=1), peak (aggregate "
        "tok/s), capacity (aggregate within --slo), goodput, tok_per_joule (tokens per joule of GPU energy, with "
        "--gpu-interval); every objective's winner is reported",
    )
    search.add_argument(
        "--knee",
        type=bounded(0.0, 10.0, kind=float),
        default=0.05,
        help="stop raising C when aggregate tok/s gains less than this fraction over the level before (0: never)",
    )
    search.add_argument(
        "--budget",
        type=parse_duration,
        default=0.0,
        help="the time the search may take, e.g. 4h: a launch that would end past it (by the launches measured so"
        " far, their starts included) is not made, and the report lists what was left (default: no limit)",
    )
    search.add_argument(
        "--clear-margin",
        type=bounded(0.0, 10.0, kind=float),
        default=0.05,
        help="a winner is clear when it beats the next by at least this fraction",
    )
    search.add_argument(
        "--leave",
        choices=["best", "original", "none"],
        default="best",
        help="what serves at the end: the winner (default), the layout from before, or the last candidate",
    )
    search.add_argument("--resume", default="", metavar="ID", help="resume this search (running the same command does too)")
    search.add_argument("--quiet", action="store_true", help="only the plan, one line per candidate and the report")
    Workload.add_cli_args(search, default_levels=SEARCH_LEVELS)


def _slo(text: str) -> slo.Bound:
    try:
        return slo.parse_slo(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def command_search(args: argparse.Namespace) -> int:
    try:
        grid = [parse_grid(spec) for spec in args.grid]
        key = api_key(args)
    except (DeclarationError, EndpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.request_rates:
        print(
            "error: the search measures closed-loop levels (--levels); --request-rates belongs to `run` for now",
            file=sys.stderr,
        )
        return 2
    problems, _ = _checked(Workload.from_cli_args(args))
    if not args.dry_run:  # a dry run writes nothing, so it makes no folder either
        problems += [problem for problem in [results.results_dir_problem(args.results_dir)] if problem]
    if args.layouts.strip(", ") == "":
        problems.append(f"--layouts {args.layouts!r}: name the declared layouts to try, comma-separated, or 'all'")
    if problems:
        print("\n".join(f"error: {problem}" for problem in problems), file=sys.stderr)
        return 2
    if args.objective == "capacity" and not args.slo:
        print("error: --objective capacity needs at least one --slo bound, e.g. --slo tpot_p99=50", file=sys.stderr)
        return 2
    if args.objective == "goodput" and not args.goodput:
        print("error: --objective goodput needs --goodput bounds, e.g. --goodput ttft:2000 tpot:50", file=sys.stderr)
        return 2
    return main_search(SearchOptions.from_cli_args(args, grid=grid, api_key=key))


def api_key(args: argparse.Namespace) -> str:
    """The key from --api-key, --api-key-file or $SGLANG_API_KEY (in that order); `main` took the variable out
    of this process's environment before anything could start a child."""
    if args.api_key:
        return args.api_key
    if args.api_key_file:
        try:
            return args.api_key_file.read_text().strip()
        except OSError as exc:
            raise EndpointError(f"--api-key-file {args.api_key_file}: {exc.strerror or exc}") from exc
    return args.environment_key


def command_run(args: argparse.Namespace) -> int:
    workload = Workload.from_cli_args(args)
    problems, prompts = _checked(workload)
    problems += [problem for problem in [results.results_dir_problem(args.results_dir)] if problem]
    if args.url:
        try:  # refused input is said and leaves no record; an endpoint that fails is recorded as failed
            args.url = check_url(args.url)
        except EndpointError as exc:
            problems.append(str(exc))
    if not problems:
        problems += _hosts_problems(args)
    if problems:
        print("\n".join(f"error: {problem}" for problem in problems), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="sglang-bench-prompts-") as tmp:
        prompts_file = dataset.write_prompts(prompts, Path(tmp) / "prompts.jsonl") if prompts else None
        return _run(args, workload, prompts_file)


def _hosts_problems(args: argparse.Namespace) -> list[str]:
    """The inventory hosts the run names (--server-host, --loadgen-hosts) are there, before anything is measured."""
    named = {"--server-host": [args.server_host] if args.server_host else []}
    if args.loadgen not in LOCAL:
        named["--loadgen-hosts"] = args.loadgen.split(",")
    if not any(named.values()):
        return []
    try:
        read = read_inventory(args.inventory)
        for option, hosts in named.items():
            read.require(hosts, args.inventory, option)
    except InventoryError as exc:
        return [str(exc)]
    return []


def _checked(workload: Workload) -> tuple[list[str], list[dataset.Prompt]]:
    """What is wrong with the workload's options, and the dataset's prompts (read once, here)."""
    problems, prompts = workload.problems(), []
    if workload.dataset:
        try:
            prompts = dataset.load_prompts(Path(workload.dataset))
        except dataset.DatasetError as exc:
            problems.append(str(exc))
    return problems, prompts


def _run(args: argparse.Namespace, workload: Workload, prompts_file: Path | None) -> int:
    loads = (
        f"request rates {','.join(f'{r:g}' for r in workload.request_rates)}/s"
        if workload.open_loop
        else (f"levels {','.join(map(str, workload.levels))}")
    )
    record: dict[str, Any] = {
        "kind": "sglang-benchmark-run",
        "started": results.utc_stamp(),
        "commit": results.project_commit(),
        "workload": {k: v for k, v in vars(workload).items()},
        "endpoint": args.url or "",
        "server_host": args.server_host or "",
    }
    host, layout = args.server_host or "", args.layout
    try:
        key = api_key(args)
        if args.url:
            url = args.url
            host = host or (url.split("//", 1)[1].replace(":", "_"))
            info = probe(url, key)
            record["server"] = {"url": url, "sglang_version": info.get("version"), "server_args": info}
            if workload.model == Workload.model:  # not named: the one the endpoint serves (a router routes by it)
                workload = replace(workload, model=served_model(url, key) or workload.model)
                record["workload"]["model"] = workload.model
            layout = layout or _layout_from_info(info)
            print(f"benchmarking {url} ({layout}), {loads}", flush=True)
            sweep = _measure(
                workload,
                args.slo,
                url=url,
                inventory=args.inventory,
                loadgen=args.loadgen,
                api_key=key,
                prompts_file=prompts_file,
            )
            bottleneck.attach(sweep.levels, record["server"])  # again: the sweep knew no /server_info (its cap)
        else:
            print(f"benchmarking the active layout of {args.server_host}, {loads}", flush=True)
            sweep = _measure(
                workload,
                args.slo,
                server_host=args.server_host,
                inventory=args.inventory,
                loadgen=args.loadgen,
                api_key=key,
                prompts_file=prompts_file,
            )
            record["server"] = sweep.server
            layout = layout or sweep.server.get("layout", "")
    except EndpointError as exc:
        record.update(status="failed", error=str(exc), levels=[])
        path = results.save_record(record, args.results_dir, host or "unknown", layout or "unknown")
        print(f"error: {exc}\nrecorded as failed: {path}", file=sys.stderr)
        return 2
    record.update(status=sweep.status, error=sweep.error, levels=sweep.levels, finished=results.utc_stamp())
    if args.slo:
        capacity = capacity_sentence(sweep.levels, args.slo)
        bounds = [vars(bound) for bound in args.slo]
        record["slo"] = {"bounds": bounds, "bracket": list(slo.bracket(sweep.levels, args.slo)), "capacity": capacity}
    if sweep.status == "interrupted" and not sweep.levels:  # nothing measured, and no layout read: nothing to keep
        print("interrupted before any level finished: nothing measured, nothing recorded", flush=True)
        return 130
    print(report.level_table(sweep.levels) if sweep.levels else "no level ran")  # first: a full disk loses no figure
    if args.slo:
        print(record["slo"]["capacity"])
    print(f"{sweep.status}{': ' + sweep.error if sweep.error else ''}", flush=True)
    try:
        path = results.save_record(record, args.results_dir, host or sweep.server.get("host", "unknown"), layout or "unknown")
    except OSError as exc:
        print(
            f"error: the record could not be saved under {args.results_dir} ({exc.strerror or exc}); nothing partial was "
            f"left there. The figures are in the table above; {results.write_fix(exc)}, and run again to keep a record.",
            file=sys.stderr,
        )
        return 1
    print(f"saved {path}")
    return 0 if sweep.status == "complete" else 1


def _measure(workload: Workload, bounds: list[slo.Bound], **where: Any) -> SweepResult:
    """The sweep as asked, or with --slo the levels up to the SLO and the bisection of its capacity."""
    if not bounds:
        return _repeated(workload, **where)
    done = measure_levels(
        workload,
        lambda one, after_level=None: run_sweep(one, **where, progress=lambda _: None, after_level=after_level),
        bounds=bounds,
        note=lambda line: print(f"  {line}"),
    )
    error = "" if done.status == "complete" else done.stopped
    status = "complete" if done.status == "complete" and done.levels else done.status
    return SweepResult(status=status, levels=done.levels, server=done.server, error=error, locust_s=done.locust_s)


def _repeated(workload: Workload, **where: Any) -> SweepResult:
    """The sweep, --repeats times; with several, each level's headline figures become means with 95% intervals."""
    runs: list[SweepResult] = []
    for repeat in range(workload.repeats):
        if workload.repeats > 1:
            print(f"repeat {repeat + 1} of {workload.repeats}", flush=True)
        # After a hang nothing higher is measured: the server sends no token again (each level would wait it out).
        runs.append(run_sweep(workload, **where, after_level=lambda level: level.get("status") != "hung"))
        if runs[-1].status == "interrupted":
            break
    if len(runs) == 1:
        return runs[0]
    statuses = {run.status for run in runs}
    status = "interrupted" if "interrupted" in statuses else "complete" if statuses == {"complete"} else "partial"
    levels = repeats.merge_runs([run.levels for run in runs])
    error = next((run.error for run in runs if run.error), "")
    locust_s = sum(run.locust_s for run in runs)
    return SweepResult(status=status, levels=levels, server=runs[-1].server, error=error, locust_s=locust_s)


def _layout_from_info(info: dict[str, Any]) -> str:
    if not info:
        return "unknown"
    sizes = {key: info.get(f"{key}_size") or 1 for key in ("tp", "ep", "pp", "dp")}
    return "-".join(f"{key}{value}" for key, value in sizes.items())


def main(argv: list[str] | None = None) -> int:
    # First of all: `git describe` for the record and ansible-runner are children, and would inherit it.
    environment_key = os.environ.pop(API_KEY_VARIABLE, "")
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    args.environment_key = environment_key
    return args.handle(args)
