"""`python -m benchmarks run`: one sweep against one endpoint (a URL, or an inventory host's active layout),
printed and recorded. benchmarks/cli.py checks the command line and hands over a `RunOptions`."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from benchmarks import bottleneck, dataset, repeats, report, results, slo
from benchmarks.capacity import capacity_sentence, measure_levels
from benchmarks.endpoint import EndpointError, probe, served_model
from benchmarks.inventory import InventoryError, read_inventory
from benchmarks.sweep import LOCAL, SweepResult, run_sweep
from benchmarks.workload import Workload


@dataclass(frozen=True)
class RunOptions:
    workload: Workload
    results_dir: Path
    inventory: Path
    url: str = ""  # the endpoint, checked; or
    server_host: str = ""  # the inventory host whose active layout is measured
    layout: str = ""  # the record's label with --url (default: from the server's /server_info)
    loadgen: str = "localhost"
    slo: list[slo.Bound] = field(default_factory=list)
    api_key: str = ""

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace, *, url: str, api_key: str) -> RunOptions:
        """The options from `run`'s command line (named as these fields); the URL comes checked and the key read."""
        given = {item.name: getattr(args, item.name) for item in fields(cls) if hasattr(args, item.name)}
        return cls(**{**given, "workload": Workload.from_cli_args(args), "url": url, "api_key": api_key})

    def where(self, prompts_file: Path | None) -> dict[str, Any]:
        """What the sweep measures and from where (run_sweep's keywords)."""
        endpoint = {"url": self.url} if self.url else {"server_host": self.server_host}
        return {
            **endpoint,
            "inventory": self.inventory,
            "loadgen": self.loadgen,
            "api_key": self.api_key,
            "prompts_file": prompts_file,
        }

    @property
    def loads(self) -> str:
        workload = self.workload
        if workload.open_loop:
            return f"request rates {','.join(f'{r:g}' for r in workload.request_rates)}/s"
        return f"levels {','.join(map(str, workload.levels))}"


def hosts_problems(options: RunOptions) -> list[str]:
    """The inventory hosts the run names (--server-host, --loadgen-hosts) are there, before anything is measured."""
    named = {"--server-host": [options.server_host] if options.server_host else []}
    if options.loadgen not in LOCAL:
        named["--loadgen-hosts"] = options.loadgen.split(",")
    if not any(named.values()):
        return []
    try:
        read = read_inventory(options.inventory)
        for option, hosts in named.items():
            read.require(hosts, options.inventory, option)
    except InventoryError as exc:
        return [str(exc)]
    return []


def main_run(options: RunOptions, prompts: list[dataset.Prompt]) -> int:
    """Measure, print the table, record; the exit status says how it went (0 complete, 1 partial, 2 failed)."""
    with tempfile.TemporaryDirectory(prefix="sglang-bench-prompts-") as tmp:
        prompts_file = dataset.write_prompts(prompts, Path(tmp) / "prompts.jsonl") if prompts else None
        record = results.new_run_record(dict(vars(options.workload)), endpoint=options.url, server_host=options.server_host)
        host, layout = options.server_host or _host_of(options.url), options.layout
        try:
            if options.url:
                options, layout = _probed(options, record)
                print(f"benchmarking {options.url} ({layout}), {options.loads}", flush=True)
            else:
                print(f"benchmarking the active layout of {options.server_host}, {options.loads}", flush=True)
            sweep = _measure(options.workload, options.slo, **options.where(prompts_file))
        except EndpointError as exc:
            record.update(status="failed", error=str(exc), levels=[])
            path = results.save_record(record, options.results_dir, host or "unknown", layout or "unknown")
            print(f"error: {exc}\nrecorded as failed: {path}", file=sys.stderr)
            return 2
        if options.url:
            bottleneck.attach(sweep.levels, record["server"])  # again: the sweep knew no /server_info (its cap)
        else:  # the sweep read what the host serves from its deploy records
            record["server"] = sweep.server
            host, layout = host or sweep.server.get("host", ""), layout or sweep.server.get("layout", "")
        return _finish(options, record, sweep, host, layout)


def _host_of(url: str) -> str:
    return url.split("//", 1)[1].replace(":", "_") if "//" in url else ""


def _probed(options: RunOptions, record: dict[str, Any]) -> tuple[RunOptions, str]:
    """--url: what the server says of itself; the model, when not named, is the one it serves (a router routes
    by it); the layout's label, when not given, from its parallel sizes."""
    info = probe(options.url, options.api_key)
    record["server"] = {"url": options.url, "sglang_version": info.get("version"), "server_args": info}
    if options.workload.model == Workload.model:
        model = served_model(options.url, options.api_key) or options.workload.model
        options = replace(options, workload=replace(options.workload, model=model))
        record["workload"]["model"] = model
    return options, options.layout or _layout_from_info(info)


def _finish(options: RunOptions, record: dict[str, Any], sweep: SweepResult, host: str, layout: str) -> int:
    """The table first (a full disk then loses no figure), then the record."""
    record.update(status=sweep.status, error=sweep.error, levels=sweep.levels, finished=results.utc_stamp())
    if options.slo:
        capacity = capacity_sentence(sweep.levels, options.slo)
        bounds = [vars(bound) for bound in options.slo]
        record["slo"] = {"bounds": bounds, "bracket": list(slo.bracket(sweep.levels, options.slo)), "capacity": capacity}
    if sweep.status == "interrupted" and not sweep.levels:  # nothing measured, and no layout read: nothing to keep
        print("interrupted before any level finished: nothing measured, nothing recorded", flush=True)
        return 130
    print(report.level_table(sweep.levels) if sweep.levels else "no level ran")
    if options.slo:
        print(record["slo"]["capacity"])
    print(f"{sweep.status}{': ' + sweep.error if sweep.error else ''}", flush=True)
    try:
        path = results.save_record(record, options.results_dir, host or "unknown", layout or "unknown")
    except OSError as exc:
        print(
            f"error: the record could not be saved under {options.results_dir} ({exc.strerror or exc}); nothing partial "
            f"was left there. The figures are in the table above; {results.write_fix(exc)}, and run again to keep a record.",
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
