"""`python -m benchmarks run | search | compare | harness`: measure an endpoint's layouts, search the best one,
store the runs, put them side by side."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import compare, dataset, harness, results, slo
from benchmarks.endpoint import API_KEY_VARIABLE, EndpointError, check_url
from benchmarks.run import RunOptions, hosts_problems, main_run
from benchmarks.search import objectives, stages
from benchmarks.search.runner import SearchOptions, main_search
from benchmarks.sweep import REPO, parse_loadgen
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


# `search`'s own options (besides the shared ones and the workload's): names, then add_argument's keywords.
_SEARCH_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (
        (
            "--server-host",
            "--server-hosts",
        ),
        {
            "dest": "server_host",
            "required": True,
            "type": _hosts,
            "help": "the inventory host to search on; several identical ones, comma-separated, run candidates in parallel, "
            "one per host at a time (checked alike first: GPUs, SGLang version, model files)",
        },
    ),
    (
        ("--layouts",),
        {
            "default": "all",
            "help": "declared layouts to try, comma-separated (default: all); `auto` adds every parallel shape the host's "
            "GPUs allow (tp, ep dividing tp, pp, dp, attention dp where the model takes it), named like tp8-ep4",
        },
    ),
    (
        ("--dry-run",),
        {"action": "store_true", "help": "judge every candidate and say what would launch; launch nothing, write nothing"},
    ),
    (
        ("--grid",),
        {
            "action": "append",
            "default": [],
            "metavar": "FLAG=V1,V2",
            "help": "server flag values to try on the layouts, e.g. max-running-requests=64,256, environment values as "
            "env.VARIABLE=V1,V2, e.g. env.NCCL_P2P_DISABLE=0,1, or speculative drafts as draft=NAME,none "
            "(sglang_draft_models) (repeatable; see --strategy)",
        },
    ),
    (
        ("--strategy",),
        {
            "choices": list(stages.STRATEGIES),
            "default": "",
            "help": "with a grid: staged (the default) ranks the layouts, varies each axis one value at a time on the best "
            "--top, then tries the best values together; grid launches every layout with every combination",
        },
    ),
    (
        ("--top",),
        {
            "type": bounded(1, 64),
            "default": 1,
            "help": "the staged search varies the axes on this many of the best layouts of each objective (default 1)",
        },
    ),
    (
        ("--objective",),
        {
            "choices": list(objectives.OBJECTIVES),
            "default": "peak",
            "help": "what the winner left serving is best at: c1 (tok/s per request at C=1), peak (aggregate "
            "tok/s), capacity (aggregate within --slo), goodput, tok_per_joule (tokens per joule of GPU energy, with "
            "--gpu-interval); every objective's winner is reported",
        },
    ),
    (
        ("--knee",),
        {
            "type": bounded(0.0, 10.0, kind=float),
            "default": 0.05,
            "help": "stop raising C when aggregate tok/s gains less than this fraction over the level before (0: never)",
        },
    ),
    (
        ("--budget",),
        {
            "type": parse_duration,
            "default": 0.0,
            "help": "the time the search may take, e.g. 4h: a launch that would end past it (by the launches measured so"
            " far, their starts included) is not made, and the report lists what was left (default: no limit)",
        },
    ),
    (
        ("--clear-margin",),
        {
            "type": bounded(0.0, 10.0, kind=float),
            "default": 0.05,
            "help": "a winner is clear when it beats the next by at least this fraction",
        },
    ),
    (
        ("--leave",),
        {
            "choices": ["best", "original", "none"],
            "default": "best",
            "help": "what serves at the end: the winner (default), the layout from before, or the last candidate",
        },
    ),
    (("--resume",), {"default": "", "metavar": "ID", "help": "resume this search (running the same command does too)"}),
    (("--quiet",), {"action": "store_true", "help": "only the plan, one line per candidate and the report"}),
)


def _add_search(search: argparse.ArgumentParser) -> None:
    _add_shared(search, slo_help="a latency bound, e.g. tpot_p99=50 (repeatable): levels stop when it breaks; capacity uses it")
    for names, spec in _SEARCH_OPTIONS:
        search.add_argument(*names, **spec)
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
    """`run`'s input checked (refused input is said and leaves no record), then benchmarks/run.py measures."""
    problems, prompts = _checked(Workload.from_cli_args(args))
    problems += [problem for problem in [results.results_dir_problem(args.results_dir)] if problem]
    url, key = "", ""
    try:
        url = check_url(args.url) if args.url else ""
        key = api_key(args)
    except EndpointError as exc:
        problems.append(str(exc))
    options = RunOptions.from_cli_args(args, url=url, api_key=key)
    if not problems:
        problems += hosts_problems(options)
    if problems:
        print("\n".join(f"error: {problem}" for problem in problems), file=sys.stderr)
        return 2
    return main_run(options, prompts)


def _checked(workload: Workload) -> tuple[list[str], list[dataset.Prompt]]:
    """What is wrong with the workload's options, and the dataset's prompts (read once, here)."""
    problems, prompts = workload.problems(), []
    if workload.dataset:
        try:
            prompts = dataset.load_prompts(Path(workload.dataset))
        except dataset.DatasetError as exc:
            problems.append(str(exc))
    return problems, prompts


def main(argv: list[str] | None = None) -> int:
    # First of all: `git describe` for the record and ansible-runner are children, and would inherit it.
    environment_key = os.environ.pop(API_KEY_VARIABLE, "")
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    args.environment_key = environment_key
    return args.handle(args)
