"""The search from start to end: declaration -> candidates -> preflight -> one launch per candidate,
measured level by level until the knee -> winners -> the winner left serving -> the report."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from benchmarks import gpu_telemetry, results, slo
from benchmarks.capacity import measure_levels
from benchmarks.inventory import Inventory, InventoryError, read_inventory
from benchmarks.search import decision, manifest, objectives, playbooks, policy, stages
from benchmarks.search import report as search_report
from benchmarks.sweep import run_sweep
from benchmarks.workload import Workload
from sglang_layout import nodes, oracle, shapes
from sglang_layout.candidates import HOST_AXES, Candidate, declaration_hash, expand
from sglang_layout.drafts import parse_drafts
from sglang_layout.errors import DeclarationError
from sglang_layout.schema import parse_layouts


@dataclass
class SearchOptions:
    server_host: str  # one inventory host, or several identical ones, comma-separated: candidates run one per host at a time
    inventory: Path
    workload: Workload
    results_dir: Path
    layouts: list[str] | None = None  # None: every declared layout
    grid: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    strategy: str = ""  # staged or grid; "": staged when a grid is given (benchmarks/search/stages.py)
    top: int = 1  # the staged search varies the axes on this many of the best layouts per objective (docs/search.md)
    objective: str = "peak"
    slo: list[slo.Bound] = field(default_factory=list)
    knee: float = 0.05
    clear_margin: float = 0.05
    budget: float = 0.0  # seconds the search may take (0: no limit); launches that would end past it are not made
    max_probes: int = 4  # extra levels to narrow the SLO capacity between the two that bracket it
    resolution: float = 0.1  # ... until the bracket is at most this fraction of the capacity wide
    leave: str = "best"  # best, original, none
    resume: str = ""
    loadgen: str = "localhost"
    api_key: str = ""
    quiet: bool = False
    dry_run: bool = False  # plan and judge every candidate, launch none, write nothing

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace, *, grid: list[tuple[str, tuple[Any, ...]]], api_key: str) -> SearchOptions:
        """The options from `search`'s command line (its options are named as these fields); the grid and the key
        come parsed and read by the caller."""
        layouts = None if args.layouts.strip() == "all" else [n.strip() for n in args.layouts.split(",") if n.strip()]
        given = {item.name: getattr(args, item.name) for item in fields(cls) if hasattr(args, item.name)}
        return cls(**{**given, "workload": Workload.from_cli_args(args), "layouts": layouts, "grid": grid, "api_key": api_key})

    @property
    def hosts(self) -> list[str]:
        return self.server_host.split(",")

    @property
    def staged(self) -> bool:
        return stages.strategy_for(self.strategy, self.grid) == "staged" and bool(self.grid)

    @property
    def label(self) -> str:
        """What names the search and its directory: the host, or the hosts joined with '+'."""
        return "+".join(self.hosts)


# What a candidate recorded as the same server as a measured one takes from it (its figures, its record).
TWIN_FIELDS = (
    *("scores", "curve", "gpu_curve", "levels_run", "stopped", "held_back"),
    *("load_s", "startup", "gpu_used_mib", "record"),
)


class SearchError(Exception):
    """The search cannot start (bad input or the box cannot be read); nothing on the box changed."""


class ResultsWriteError(Exception):
    """A record or the manifest could not be written mid-search; the manifest on disk is its last good state."""


class _Interrupts:
    """Ctrl-C during a launch lets the swap finish (it rolls back on its own); a second one stops following it.
    A one-box swap runs on the host (deploy.yml's sglang_swap), so the host finishes it either way."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1
        print(
            "\n  interrupted: the swap in progress finishes (Ctrl-C again stops waiting for it; the box still finishes"
            " it); then the search stops",
            flush=True,
        )

    @property
    def stop(self) -> bool:
        return self.count > 0


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _validate(entries: dict[str, Any], declaration: dict[str, Any]) -> None:
    """The candidates under the declaration's own rules, before anything runs (names the field and the fix)."""
    try:
        parse_layouts(
            entries,
            common_args=declaration.get("sglang_common_args") or {},
            common_env=declaration.get("sglang_common_env") or {},
            drafts=parse_drafts(declaration.get("sglang_draft_models")),
        )
    except DeclarationError as exc:
        raise SearchError(f"{exc} (a candidate built from --layouts/--grid)") from exc


def _entry(
    candidate: Candidate, digest: str, verdict: dict[str, Any] | None, sglang: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The candidate before launch: refused by our rules or by the installed SGLang's own check, or pending;
    what SGLang will really run (its rewrites and choices) recorded either way."""
    entry: dict[str, Any] = {
        "name": candidate.name,
        "layout": candidate.layout,
        "overrides": candidate.overrides,
        "label": candidate.label,
        "hash": digest,
        "status": "pending",
    }
    if verdict is None:
        return {**entry, "status": "refused", "reasons": ["preflight gave no verdict"]}
    findings = verdict.get("findings") or []
    entry["warnings"] = [f.get("message", "") for f in findings if f.get("severity") == "warning"]
    judged = next((c for c in (sglang or {}).get("candidates") or [] if c["name"] == candidate.name), None)
    if judged is not None:
        entry["sglang"] = {
            "version": (sglang or {}).get("sglang_version", ""),
            "accepted": judged["accepted"],
            "refusal": oracle.refusal_text(judged["refusal"]) if judged.get("refusal") else "",
            "resolved": oracle.rewrites(judged),
            "agrees_with_ours": oracle.agrees(verdict, bool(judged["accepted"])),
        }
        if judged.get("fingerprint"):  # the server SGLang resolves it to, with the environment it runs in
            declared = candidate.entry if isinstance(candidate.entry, dict) else {}
            server = {"args": judged["fingerprint"], "env": declared.get("env") or {}}
            # What the host sets for it is part of the server (only when set, so earlier searches' hashes hold).
            server.update({key: declared[key] for key in HOST_AXES.values() if declared.get(key) is not None})
            entry["server"] = declaration_hash(server, {})
    if not verdict.get("ok"):
        reasons = [
            f"{f.get('message', '')}" + (f". Fix: {f['fix']}" if f.get("fix") else "")
            for f in findings
            if f.get("severity") == "error"
        ]
        entry.update(status="refused", reasons=reasons or [verdict.get("summary", "refused")])
    elif judged is not None and not judged["accepted"]:
        said = f"SGLang {entry['sglang']['version']}'s own check refuses it: {entry['sglang']['refusal']}"
        entry.update(status="refused", reasons=[said])
    return entry


@dataclass
class _Plan:
    """What the search is: its candidates under the declaration, its identity, and an earlier run of it."""

    inventory: Inventory
    declaration: dict[str, Any]
    candidates: list[Candidate]
    entries: dict[str, Any]  # candidate name -> its declaration entry
    digests: dict[str, str]
    workload: dict[str, Any]  # the workload as the search's identity holds it
    identifier: str
    path: Path  # the manifest
    previous: dict[str, Any] | None  # the manifest of an earlier run of the same search
    stage_of: dict[str, int] = field(default_factory=dict)  # candidate name -> its stage (a staged search)

    def add(self, candidates: list[Candidate], stage: int) -> None:
        """Stage 3's candidates, once stage 2's scores are known."""
        shared = {key: self.declaration.get(key) for key in playbooks.SHARED_KEYS}
        for candidate in candidates:
            self.candidates.append(candidate)
            self.entries[candidate.name] = candidate.entry
            self.digests[candidate.name] = declaration_hash(candidate.entry, shared)
            self.stage_of[candidate.name] = stage

    @property
    def layouts_for_deploy(self) -> dict[str, Any]:
        return {**self.declaration["sglang_layouts"], **self.entries}


def run_search(options: SearchOptions, *, say: Callable[[str], None] = print) -> int:
    """Plan, preflight, launch and measure each candidate once, leave the winner: each step a function below."""
    started = time.monotonic()
    note = (lambda _: None) if options.quiet else say
    plan = _plan(options)
    names = ", ".join(c.name for c in plan.candidates)
    say(f"search {plan.identifier} on {options.label}: {len(plan.candidates)} candidates ({names})")
    checks = _preflight(options, plan, say, note)
    state = _initial_state(options, plan, checks)
    if options.dry_run:
        todo = _announce(state, options, say)
        say(_dry_run_text(state, todo, options))
        return 0
    manifest.save(state, plan.path)
    todo = _announce(state, options, say)
    launcher = _Launcher(options, plan, state, todo, say, note)
    interrupted = _launch_all(launcher, options, todo)
    if options.staged and not interrupted:
        interrupted = _later_stages(launcher, say)
    state["winners"] = _winners(state, options)
    # What the report prints, in the manifest too: a reader of the JSON need not recompute it.
    state["effects"], state["launches"] = search_report.effects(state), search_report.counts(state)
    if interrupted:
        manifest.save(state, plan.path)
        say(f"search interrupted: finished candidates are kept. Resume with the same command (or --resume {plan.identifier}).")
        return 130
    state["serving_at_end"] = _leave(state, options, plan.layouts_for_deploy, plan.inventory.groups, say)
    state["finished"] = results.utc_stamp()
    state["wall_s"] = round(time.monotonic() - started, 1)
    manifest.save(state, plan.path)
    outputs = search_report.write(state, plan.path, plan.entries)
    say(search_report.text(state, plan.entries))
    say(f"manifest {plan.path}\nreport {outputs['markdown']}" + (f"\nplots {outputs['plot']}" if outputs.get("plot") else ""))
    return 0 if any(e["status"] == "measured" for e in state["candidates"]) else 1


def _plan(options: SearchOptions) -> _Plan:
    """The candidates from the inventory's declaration, checked by its rules, and the search's identity."""
    try:
        inventory = read_inventory(options.inventory)
        inventory.require(options.hosts, options.inventory, "--server-host")
        declaration = inventory.declaration(options.hosts[0], options.inventory)
        chosen = options.layouts
        if chosen and shapes.AUTO in chosen:
            shape = _host_shape(options, declaration)
            layouts, chosen = shapes.with_auto(
                declaration["sglang_layouts"],
                chosen,
                int(shape.get("gpu_count") or 0),
                attention_dp=bool(shape.get("attention_dp")),
            )
            declaration = {**declaration, "sglang_layouts": layouts}
        stage_of: dict[str, int] = {}
        if options.staged:
            bases, singles = stages.first_stages(declaration["sglang_layouts"], chosen, options.grid)
            candidates = bases + singles
            stage_of = {c.name: 1 for c in bases} | {c.name: 2 for c in singles}
        else:
            candidates = expand(declaration["sglang_layouts"], chosen, options.grid)
    except (InventoryError, DeclarationError) as exc:
        raise SearchError(str(exc)) from exc
    entries = {c.name: c.entry for c in candidates}
    _validate(entries, declaration)
    shared = {key: declaration.get(key) for key in playbooks.SHARED_KEYS}
    digests = {c.name: declaration_hash(c.entry, shared) for c in candidates}
    # Fields added after searches were first stored count only when set: the ids (and so the resumability)
    # of searches begun before them stay the same. The search refuses open loop, so those never are.
    later = {
        **{"request_rates": [], "burstiness": 1.0, "max_concurrency": 0, "dataset": "", "prefix_groups": 0, "prefix_tokens": 0},
        "stall_timeout": 60.0,
    }
    workload = {k: v for k, v in vars(options.workload).items() if k not in later or v != later[k]}
    identifier, path, previous = _stored(options, workload, [digests[c.name] for c in candidates])
    return _Plan(inventory, declaration, candidates, entries, digests, workload, identifier, path, previous, stage_of)


def _stored(options: SearchOptions, workload: dict[str, Any], digests: list[str]) -> tuple[str, Path, dict | None]:
    """The search's id (its candidates and what decides their levels), its manifest's path, and the manifest
    stored there by an earlier run of the same search, if any."""
    identity = {
        **workload,
        "knee": options.knee,
        "slo": [vars(b) for b in options.slo],
        "max_probes": options.max_probes,
        "resolution": options.resolution,
        # Only a staged search says so: the ids of the searches stored before stages existed stay the same.
        **({"strategy": "staged", "top": options.top} if options.staged else {}),
    }
    host = options.label
    identifier = options.resume or manifest.search_id(host, digests, identity)
    path = manifest.path_for(options.results_dir, host, identifier)
    try:
        previous = manifest.load(path)
    except ValueError as exc:
        raise SearchError(str(exc)) from exc
    if options.resume and previous is None:
        raise SearchError(f"--resume {identifier}: no such search for {host} under {path.parent}")
    measured_as = (previous or {}).get("workload"), (previous or {}).get("knee"), (previous or {}).get("slo")
    if previous and measured_as != (workload, options.knee, [vars(b) for b in options.slo]):
        raise SearchError(
            f"--resume {identifier}: that search measured another workload, knee or SLO; give the same options, or drop --resume"
        )
    return identifier, path, previous


def _host_shape(options: SearchOptions, declaration: dict[str, Any]) -> dict[str, Any]:
    """The host's GPU count and whether its model takes attention DP, from a preflight of the declared layouts."""
    version = str(declaration.get("sglang_version") or "")
    try:
        checked = playbooks.preflight(options.inventory, options.hosts[0], declaration["sglang_layouts"], version)
    except playbooks.PlaybookError as exc:
        raise SearchError(str(exc)) from exc
    if not (checked.host_shape or {}).get("gpu_count"):
        raise SearchError(
            f"--layouts auto: {options.hosts[0]} has no recorded GPU count; run provision.yml (it records the GPUs) first"
        )
    return checked.host_shape or {}


def _preflight(
    options: SearchOptions, plan: _Plan, say: Callable[[str], None], note: Callable[[str], None]
) -> dict[str, playbooks.PreflightResult]:
    """Every candidate against each host's recorded facts (nothing changes on the box); the hosts alike."""
    note("preflight of every candidate against the host's recorded facts (nothing changes on the box)")
    version = str(plan.declaration.get("sglang_version") or "")
    try:
        checks = {name: playbooks.preflight(options.inventory, name, plan.entries, version) for name in options.hosts}
    except playbooks.PlaybookError as exc:
        raise SearchError(str(exc)) from exc
    if len(checks) > 1:
        _require_alike(checks, say)
    return checks


def _initial_state(options: SearchOptions, plan: _Plan, checks: dict[str, playbooks.PreflightResult]) -> dict[str, Any]:
    """The manifest before any launch: each candidate refused (with why), kept from an earlier run, or pending."""
    checked = checks[options.hosts[0]]
    previous = plan.previous or {}
    state: dict[str, Any] = {
        "kind": manifest.KIND,
        "id": plan.identifier,
        "host": options.label,
        "created": previous.get("created") or results.utc_stamp(),
        "workload": plan.workload,
        "layouts": options.layouts or "all",
        "grid": [[k, list(v)] for k, v in options.grid],
        "objective": options.objective,
        "slo": [vars(b) for b in options.slo],
        "knee": options.knee,
        "clear_margin": options.clear_margin,
        "leave": options.leave,
        "original_layout": previous.get("original_layout", checked.serving),
        "candidates": [],
    }
    if len(checks) > 1:
        state["hosts"] = options.hosts
        state["original_layouts"] = previous.get("original_layouts") or {n: c.serving for n, c in checks.items()}
    if options.staged:
        layouts = sum(1 for stage in plan.stage_of.values() if stage == 1)  # `auto` expanded
        state.update(strategy="staged", top=options.top, full_grid=stages.full_grid_size(layouts, options.grid))
    state["candidates"] = [_state_entry(candidate, options, plan, checked) for candidate in plan.candidates]
    refused = {e["layout"] for e in state["candidates"] if e.get("stage") == 1 and e["status"] == "refused"}
    for entry in state["candidates"]:  # a refused layout's knobs would be refused for the same reason: said once
        if entry.get("stage") == 2 and entry["layout"] in refused:
            entry.update(status="skipped", reasons=[f"its layout {entry['layout']} is refused"])
    return state


def _state_entry(candidate: Candidate, options: SearchOptions, plan: _Plan, checked: playbooks.PreflightResult) -> dict[str, Any]:
    """One candidate's manifest entry before launch: refused (with why), kept from an earlier run, or pending."""
    digest = plan.digests[candidate.name]
    entry = _entry(candidate, digest, checked.verdicts.get(candidate.name), checked.sglang)
    if candidate.name in plan.stage_of:
        entry["stage"] = plan.stage_of[candidate.name]
    try:
        span = nodes.layout_span(plan.layouts_for_deploy, candidate.name, plan.inventory.groups, options.hosts[0])
    except DeclarationError as exc:  # e.g. its nodes group is not in the inventory
        span = []
        entry.update(status="refused", reasons=[str(exc)])
    if len(span) > 1 and entry["status"] != "refused":
        if missing := [h for h in span if h not in options.hosts]:
            entry.update(status="refused", reasons=[_span_refusal(candidate.name, span, missing)])
        else:
            entry["nodes"] = span  # launched after the one-box candidates, on all its nodes at once
    if entry["status"] != "refused" and (kept := manifest.kept(plan.previous, candidate.name, digest)):
        entry = {**kept, "kept_from_earlier_run": True}
    return entry


def _announce(state: dict[str, Any], options: SearchOptions, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The refusals, what is left to launch and an estimate of the time; the candidates to launch."""
    refused = [e for e in state["candidates"] if e["status"] == "refused"]
    todo = [e for e in state["candidates"] if e["status"] == "pending" and e.get("stage", 1) == 1]
    for entry in refused:
        reasons = "; ".join(entry["reasons"])
        say(f"  refused, never launched: {reasons if reasons.startswith(entry['name']) else entry['name'] + ': ' + reasons}")
    kept_count = sum(1 for e in state["candidates"] if e.get("kept_from_earlier_run"))
    say(
        f"{len(todo)} to launch, {len(refused)} refused by preflight"
        + (f", {kept_count} kept from the earlier run" if kept_count else "")
        + f"; levels {','.join(map(str, options.workload.levels))} until the knee ({100 * options.knee:.0f}%)"
        + ("" if not options.slo else f" or the SLO ({', '.join(f'{b.name}<={b.limit_ms:g} ms' for b in options.slo)})")
    )
    if options.staged:
        per_layout: dict[str, int] = {}
        for entry in state["candidates"]:
            if entry.get("stage") == 2 and entry["status"] == "pending":
                per_layout[entry["layout"]] = per_layout.get(entry["layout"], 0) + 1
        reported = search_policy(options).objectives
        later = sum(sorted(per_layout.values(), reverse=True)[: options.top * len(reported)])
        say(
            f"staged: stage 1 {stages.STAGE_NAMES[1]} ({len(todo)} to launch), then stage 2 {stages.STAGE_NAMES[2]} on the"
            f" best {options.top} for each of {', '.join(reported)} (up to {later}; a layout best for several is varied"
            f" once), then stage 3 {stages.STAGE_NAMES[3]} per objective; the full grid would be {state['full_grid']}"
            " candidates"
        )
    earlier = manifest.earlier_durations(options.results_dir, options.label)
    if todo and earlier:
        estimate = _minutes(sum(earlier) / len(earlier) * len(todo))
        source = f"{len(earlier)} candidates of earlier searches on {options.label}"
        say(f"estimated time: about {estimate} (from {source}; updated later)")
    elif todo:
        say("estimated time: known after the first candidate (no earlier search on this host)")
    return todo


class _Launcher:
    """One candidate at a time per host: deploy, measure, record, and say how long is left."""

    def __init__(
        self,
        options: SearchOptions,
        plan: _Plan,
        state: dict[str, Any],
        todo: list[dict[str, Any]],
        say: Callable[[str], None],
        note: Callable[[str], None],
    ) -> None:
        self.options, self.plan, self.state, self.todo, self.say, self.note = options, plan, state, todo, say, note
        self.by_name = {c.name: c for c in plan.candidates}
        self.lock = threading.Lock()  # the manifest and the tallies, shared by the hosts' threads
        self.durations: list[float] = []
        self.began = time.monotonic()

    def save(self) -> None:
        with self.lock:
            manifest.save(self.state, self.plan.path)

    def over_budget(self) -> str:
        """Why the next launch would end past --budget ('' when it fits or nothing was measured yet to tell)."""
        budget = self.options.budget
        with self.lock:
            done = list(self.durations)
        if not budget or not done:
            return ""
        spent, launch = time.monotonic() - self.began, sum(done) / len(done)
        if spent + launch <= budget:
            return ""
        return (
            f"over the --budget of {_minutes(budget)}: {_minutes(spent)} spent, a launch takes about {_minutes(launch)}"
            " here (its start included); give more time or fewer candidates, and the same command resumes"
        )

    def _twin(self, entry: dict[str, Any]) -> dict[str, Any] | None:
        """A measured candidate whose server is this one's (SGLang's resolved arguments, the same environment)."""
        if not entry.get("server"):
            return None
        with self.lock:
            return next(
                (
                    other
                    for other in self.state["candidates"]
                    if other is not entry
                    and other.get("server") == entry["server"]
                    and other["status"] == "measured"
                    and not other.get("same_server_as")
                ),
                None,
            )

    def __call__(self, position: int, entry: dict[str, Any], on: str, interrupts: _Interrupts) -> bool:
        """One candidate on host `on` (on all its nodes, if multi-node): deploy, measure, record. True to stop the search."""
        candidate = self.by_name[entry["name"]]
        if self._recorded_unlaunched(entry, f"[{position}/{len(self.todo)}] {candidate.name} ({candidate.label})"):
            return False
        began = time.monotonic()
        span = entry.get("nodes") or [on]  # a multi-node candidate: every node, measured through rank 0
        where = f" on {' + '.join(span)}" if len(self.options.hosts) > 1 else ""
        self.say(f"[{position}/{len(self.todo)}] {candidate.name} ({candidate.label}): deploying{where}")
        entry.update(status="running", started=results.utc_stamp(), **({"host": "+".join(span)} if where else {}))
        self.save()
        deployed = playbooks.deploy(
            self.options.inventory,
            ",".join(span),
            candidate.name,
            self.plan.layouts_for_deploy,
            cancel=lambda: interrupts.count > 1,
            phase=lambda p, n=candidate.name: self.note(f"  {n}: {p}{where}"),
        )
        if not deployed.ok:
            failed = "interrupted" if interrupts.count > 1 else "failed_to_start"
            took = round(time.monotonic() - began, 1)
            entry.update(status=failed, error=deployed.message, duration_s=took, finished=results.utc_stamp())
            self.save()
            first_line = deployed.message.splitlines()[0] if deployed.message else "no message"
            self.say(f"  {candidate.name} did not start: {first_line}")
            return interrupts.stop
        self._record_start(candidate, entry, deployed, where)
        on = span[0]
        measured = (
            "interrupted" if interrupts.stop else _measure(candidate, entry, self.options, self.note, self.plan.identifier, on)
        )
        entry["duration_s"] = round(time.monotonic() - began, 1)
        # The search's own cost: everything but loading the model and Locust sending requests.
        entry["overhead_s"] = round(entry["duration_s"] - (deployed.load_s or 0.0) - entry.get("locust_s", 0.0), 1)
        if measured == "interrupted":
            entry["status"] = "interrupted"
            self.save()
            return True
        self.save()
        self._say_measured(candidate, entry)
        return False

    def _recorded_unlaunched(self, entry: dict[str, Any], head: str) -> bool:
        """Past the budget, or the same server as one measured: recorded so, not launched."""
        if over := self.over_budget():
            entry.update(status="skipped", reasons=[over])
            self.say(f"{head}: not launched: {over}")
        elif twin := self._twin(entry):
            entry.update({key: twin[key] for key in TWIN_FIELDS if key in twin}, status="measured", same_server_as=twin["name"])
            self.say(
                f"{head}: SGLang resolves it to the same server as {twin['name']} (the same arguments and environment):"
                f" recorded as {twin['name']}, not launched"
            )
        else:
            return False
        self.save()
        return True

    def _record_start(self, candidate: Candidate, entry: dict[str, Any], deployed: playbooks.DeployResult, where: str) -> None:
        entry["load_s"] = deployed.load_s
        entry["gpu_used_mib"] = deployed.gpu_used_mib
        if deployed.startup:
            entry["startup"] = deployed.startup
        loaded = f" after {deployed.load_s:.1f} s of loading" if deployed.load_s else ""
        phases = f" ({search_report.startup_text(deployed.startup)})" if deployed.startup else ""
        self.note(f"  {candidate.name}: serving{loaded}{phases}{where}")

    def _say_measured(self, candidate: Candidate, entry: dict[str, Any]) -> None:
        """Its figures, its time and, from the launches so far, how long the rest will take."""
        with self.lock:
            self.durations.append(entry["duration_s"])
            left = sum(1 for e in self.todo if e["status"] in ("pending", "running")) / len(self.options.hosts)
            mean = sum(self.durations) / len(self.durations)
        scores = entry.get("scores") or {}
        self.say(
            f"  {candidate.name}: {entry['status']}, C=1 {_fig(scores.get('c1'))} tok/s, peak {_fig(scores.get('peak'))} tok/s"
            f" at C={scores.get('peak_c') or '-'} ({entry.get('stopped') or 'all levels'}); {_minutes(entry['duration_s'])}"
            + (f"; about {_minutes(mean * left)} left" if left else "")
        )


def _launch_all(launch: _Launcher, options: SearchOptions, todo: list[dict[str, Any]]) -> bool:
    """One-box candidates one per host at a time; then each multi-node one alone, on all its nodes. True if interrupted."""
    interrupted = False
    queue = list(enumerate(todo, 1))
    one_box = [(position, entry) for position, entry in queue if "nodes" not in entry]
    spanning = [(position, entry) for position, entry in queue if "nodes" in entry]
    if len(options.hosts) > 1 and one_box:
        interrupted = _on_every_host(options.hosts, one_box, launch)
    for position, entry in [] if interrupted else (spanning if len(options.hosts) > 1 else queue):
        interrupts = _Interrupts()
        previous_handler = signal.signal(signal.SIGINT, interrupts)
        try:
            interrupted = launch(position, entry, options.hosts[0], interrupts)
        finally:
            signal.signal(signal.SIGINT, previous_handler)
        if interrupted:
            break
    return interrupted


def _dry_run_text(state: dict[str, Any], todo: list[dict[str, Any]], options: SearchOptions) -> str:
    """What a search would launch, each candidate once, and what it would vary later; nothing was written."""
    lines = [f"dry run: would launch {len(todo)} candidate(s), in this order:"]
    lines += [f"  {e['name']} ({e['label']})" for e in todo]
    later = [e for e in state["candidates"] if e.get("stage") == 2 and e["status"] == "pending"]
    if later:
        lines.append(
            f"then stage 2 on the best {options.top} of them for each objective, one value at a time:"
            f" {len({e['label'] for e in later})} candidate(s) passed preflight"
        )
    lines.append("nothing launched, nothing written (drop --dry-run to search)")
    return "\n".join(lines)


def search_policy(options: SearchOptions) -> policy.Policy:
    """The staged strategy's settings: every objective the search reports has its incumbent."""
    asked = objectives.asked({"slo": options.slo, "workload": vars(options.workload)})
    reported = [objective for objective in objectives.OBJECTIVES if asked.get(objective, True)]
    return policy.Policy(top=options.top, clear_margin=options.clear_margin, objectives=tuple(reported))


def _later_stages(launcher: _Launcher, say: Callable[[str], None]) -> bool:
    """Stages 2 and 3 of a staged search, as the policy says from what was measured (benchmarks/search/policy.py).
    True if interrupted."""
    options, plan, state = launcher.options, launcher.plan, launcher.state
    rules = search_policy(options)
    layouts = plan.declaration["sglang_layouts"]
    by_name = {e["name"]: e for e in state["candidates"]}
    seen: set[tuple[int, tuple[str, ...]]] = set()
    while True:
        step = policy.next_step(layouts, state["candidates"], rules)
        for name, why in step.skip.items():
            by_name[name].update(status="skipped", reasons=[why])
        if step.stage == 0 or ((step.stage, tuple(step.launch)) in seen and not step.new):
            break
        if over := launcher.over_budget():  # the stages that cannot fit are listed, not launched
            for name in step.launch:
                by_name[name].update(status="skipped", reasons=[over])
            say(f"stage {step.stage} ({stages.STAGE_NAMES[step.stage]}) not begun: {over}")
            break
        seen.add((step.stage, tuple(step.launch)))
        if step.new:
            _add_candidates(launcher, step.new, stage=3)
            by_name.update({e["name"]: e for e in state["candidates"]})
        state.setdefault("explored", {})[str(step.stage)] = step.explored
        said = "; ".join(f"{objective}: {', '.join(where) or 'nothing'}" for objective, where in step.explored.items())
        todo = [by_name[name] for name in step.launch] + [by_name[c.name] for c in step.new]
        todo = [e for e in todo if e["status"] in ("pending", "skipped")]
        for entry in todo:
            entry.update(status="pending", reasons=[])
        names = ", ".join(f"{e['name']} ({e['label']})" for e in todo) if step.stage == 3 else f"{len(todo)} to launch"
        say(f"stage {step.stage} ({stages.STAGE_NAMES[step.stage]}), per objective {said}: {names or 'nothing to launch'}")
        launcher.save()
        launcher.todo = todo
        if _launch_all(launcher, options, todo):
            return True
        for entry in state["candidates"]:
            if entry.get("stage") == 3 and entry["status"] == "measured" and "kept" not in entry:
                made_for = policy.built_for(layouts, state["candidates"], entry["name"], rules)
                entry["built_for"] = made_for
                entry["kept"], entry["kept_why"] = policy.keep(state["candidates"], entry, made_for, options.clear_margin)
                say(f"  {entry['name']}: {entry['kept_why']}")
        launcher.save()
    if not any(e.get("stage") == 3 for e in state["candidates"]):
        say(f"stage 3 ({stages.STAGE_NAMES[3]}): no layout gained clearly on two axes or more for one objective; none to combine")
    launcher.save()
    return False


def _add_candidates(launcher: _Launcher, candidates: list[Candidate], stage: int) -> None:
    """Candidates a later stage made: checked by the declaration's rules, preflight and SGLang's own check."""
    options, plan, state = launcher.options, launcher.plan, launcher.state
    entries = {c.name: c.entry for c in candidates}
    _validate(entries, plan.declaration)
    plan.add(candidates, stage=stage)
    launcher.by_name.update({c.name: c for c in candidates})
    version = str(plan.declaration.get("sglang_version") or "")
    try:
        checked = playbooks.preflight(options.inventory, options.hosts[0], entries, version)
    except playbooks.PlaybookError as exc:
        raise SearchError(str(exc)) from exc
    state["candidates"] += [_state_entry(c, options, plan, checked) for c in candidates]


def _span_refusal(name: str, span: list[str], missing: list[str]) -> str:
    return (
        f"{name} spans {', '.join(span)} (a multi-node layout) but {', '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} not among the searched hosts. Fix: --server-hosts {','.join(span)}"
    )


def _require_alike(checks: dict[str, playbooks.PreflightResult], say: Callable[[str], None]) -> None:
    """Numbers from several hosts are compared as one box's only when the hosts are alike (nothing changed yet)."""
    problems, notes = nodes.differences({name: check.identity or {} for name, check in checks.items()})
    for line in notes:
        say(f"  note: {line}")
    if problems:
        raise SearchError(
            "the hosts differ, so their candidates' numbers would not compare: "
            + "; ".join(problems)
            + ". Search them one at a time, or make them alike (provision.yml, the same model files)"
        )
    verdicts = {name: {k: v.get("ok") for k, v in check.verdicts.items()} for name, check in checks.items()}
    if len({json.dumps(v, sort_keys=True) for v in verdicts.values()}) > 1:
        raise SearchError(f"preflight judged the candidates differently on {', '.join(checks)}: the hosts are not alike")


def _on_every_host(
    hosts: list[str], queue: list[tuple[int, dict[str, Any]]], launch: Callable[[int, dict[str, Any], str, _Interrupts], bool]
) -> bool:
    """The candidates in parallel, one per host at a time, each host taking the next as it finishes. True if interrupted."""
    interrupts = _Interrupts()
    taking = threading.Lock()
    stopped = threading.Event()

    failures: list[BaseException] = []

    def work(host: str) -> None:
        while not stopped.is_set():
            with taking:
                if not queue:
                    return
                position, entry = queue.pop(0)
            try:
                if launch(position, entry, host, interrupts):
                    stopped.set()
            except Exception as exc:  # e.g. a full results disk: the other hosts stop after their candidate too
                failures.append(exc)
                stopped.set()

    previous_handler = signal.signal(signal.SIGINT, interrupts)
    try:
        threads = [threading.Thread(target=work, args=(host,), name=f"search-{host}") for host in hosts]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # wakes for Ctrl-C, which the handler counts
    finally:
        signal.signal(signal.SIGINT, previous_handler)
    if failures:
        raise failures[0]
    return stopped.is_set() or interrupts.stop


def _fig(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _measure(
    candidate: Candidate, entry: dict[str, Any], options: SearchOptions, note: Callable[[str], None], identifier: str, host: str
) -> str:
    """Every level on this one launch, lowest first, until the knee or the SLO; one run record for the candidate."""
    workload = options.workload
    record = results.new_run_record(dict(vars(workload)), server_host=host)
    measured = measure_levels(
        workload,
        lambda one, after_level=None: run_sweep(
            one,
            server_host=host,
            inventory=options.inventory,
            loadgen=options.loadgen,
            api_key=options.api_key,
            progress=lambda _: None,
            after_level=after_level,
        ),
        bounds=options.slo,
        knee=options.knee,
        max_probes=options.max_probes,
        resolution=options.resolution,
        note=lambda line: note(f"  {candidate.name}: {line}"),
    )
    levels, stopped = measured.levels, measured.stopped
    usable = any(slo.usable(level) for level in levels)
    search = {"id": identifier, "candidate": candidate.name, "layout": candidate.layout, "overrides": candidate.overrides}
    search |= {"hash": entry["hash"], "load_s": entry.get("load_s"), "stopped": stopped}
    record.update(status=measured.status, error="" if usable else stopped, levels=levels, server=measured.server, search=search)
    record["finished"] = results.utc_stamp()
    if levels:
        entry["record"] = _saved(record, candidate, options, host)
    _record_figures(entry, levels, stopped, measured.locust_s, options)
    if measured.status == "interrupted":
        return "interrupted"
    entry["status"] = "measured" if usable else "failed_requests"
    if not usable:
        entry["error"] = stopped or "no request completed"
    return entry["status"]


def _saved(record: dict[str, Any], candidate: Candidate, options: SearchOptions, host: str) -> str:
    """The candidate's run record, written; a write that fails says what was measured and how to keep it."""
    try:
        return str(results.save_record(record, options.results_dir, host, candidate.name))
    except OSError as exc:
        figures = objectives.scores(record["levels"], options.slo)
        raise ResultsWriteError(
            f"{candidate.name}'s record could not be written under {options.results_dir} ({exc.strerror or exc}); "
            f"it measured C=1 {_fig(figures.get('c1'))} tok/s, peak {_fig(figures.get('peak'))} tok/s. "
            f"The manifest keeps every candidate finished before it: {results.write_fix(exc)}, then run the same "
            f"command to measure {candidate.name} again"
        ) from exc


def _record_figures(
    entry: dict[str, Any], levels: list[dict[str, Any]], stopped: str, locust_s: float, options: SearchOptions
) -> None:
    """The candidate's figures in the manifest: its levels, scores, curves and, when it hung, the hang."""
    entry.update(
        locust_s=round(locust_s, 1),
        levels_run=[level["concurrency"] for level in levels],
        stopped=stopped,
        finished=results.utc_stamp(),
        scores=objectives.scores(levels, options.slo),
        curve=_curve(levels),
        gpu_curve=_gpu_curve(levels),
    )
    entry["held_back"] = _held_back(levels, entry["scores"])
    if hung := next((level for level in levels if level.get("status") == "hung"), None):
        # Named, with what the GPUs did meanwhile; the next deploy stops it, and the search goes on.
        entry["hung"] = {"level": hung.get("concurrency"), **(hung.get("bottleneck") or {})}
        if figures := gpu_telemetry.headline(hung.get("gpus")):
            entry["hung"]["gpus"] = figures


def _curve(levels: list[dict[str, Any]]) -> list[list[float]]:
    """(C, aggregate tok/s, tok/s per request p50) per usable level: what the plots draw."""
    return [[lv["concurrency"], lv["aggregate_tok_s"], lv["decode_tok_s"]["p50"]] for lv in levels if slo.usable(lv)]


def _gpu_curve(levels: list[dict[str, Any]]) -> list[list[float]]:
    """(C, the busiest GPU's SM %, the largest PCIe rx+tx MB/s, medians) per usable level with GPU telemetry."""
    curve = []
    for level in levels:
        figures = gpu_telemetry.headline(level.get("gpus"))
        if figures and slo.usable(level):
            curve.append([level["concurrency"], figures["sm_busiest"], figures["pcie_mb_s"]])
    return curve


def _held_back(levels: list[dict[str, Any]], scores: dict[str, Any]) -> dict[str, Any] | None:
    """What held the candidate back at its peak level (benchmarks/bottleneck.py), or None."""
    at_peak = next((lv for lv in levels if lv.get("concurrency") == scores.get("peak_c") and lv.get("bottleneck")), None)
    return {"level": at_peak["concurrency"], **at_peak["bottleneck"]} if at_peak else None


def _winners(state: dict[str, Any], options: SearchOptions) -> dict[str, Any]:
    """Each objective's winner as a user adopts it: ties go to the plainer server (benchmarks/search/decision.py)."""
    found = {}
    for objective in objectives.OBJECTIVES:
        best = decision.decide(state["candidates"], objective, options.clear_margin)
        if best is not None:
            found[objective] = {**vars(best), "sentence": best.sentence()}
    return found


def _leave(
    state: dict[str, Any],
    options: SearchOptions,
    layouts: dict[str, Any],
    groups: dict[str, list[str]],
    say: Callable[[str], None],
) -> str:
    """Deploy what the user asked to be serving at the end: the winner, the layout from before, or nothing changed.

    Each layout is deployed once, on all its hosts at once (all its nodes, for a multi-node layout); a
    searched host outside a multi-node winner's nodes is left as it is."""
    if options.leave == "none":
        return "as the search left it"
    if options.leave == "best":
        best = state["winners"].get(options.objective) or state["winners"].get("peak") or state["winners"].get("c1")
        target = best["name"] if best else ""
        why = f"the {options.objective} winner"
    else:
        target, why = state.get("original_layout") or "", "the layout serving before the search"
    if not target and not state.get("original_layouts"):
        say(f"leaving the box as it is: no {why}")
        return "as the search left it"
    originals = state.get("original_layouts") or {}
    left = ""
    plan: dict[str, list[str]] = {}  # each layout to leave serving -> its hosts (one deploy.yml each, hosts in parallel)
    for host in options.hosts:
        goal = originals.get(host, target) if options.leave == "original" else target
        if not goal:
            say(f"leaving {host} as it is: no {why}")
            left = left or "as the search left it"
            continue
        try:
            span = nodes.layout_span(layouts, goal, groups, host)
        except DeclarationError as exc:
            say(f"  could not leave {goal} serving on {host}: {exc}")
            return f"failed to deploy {goal}"
        if host not in span:
            say(f"leaving {host} as it is: {goal} runs on {', '.join(span)}")
            continue
        plan.setdefault(goal, [])
        plan[goal] += [name for name in span if name not in plan[goal]]  # a multi-node layout: all its nodes
    for goal, where in plan.items():
        on = f" on {' + '.join(where)}" if len(options.hosts) > 1 or len(where) > 1 else ""
        say(f"leaving {goal} serving{on} ({why}): deploy.yml -e layout={goal}")
        done = playbooks.deploy(options.inventory, ",".join(where), goal, layouts)
        if not done.ok:
            say(f"  could not leave {goal} serving{on}: {done.message}")
            return f"failed to deploy {goal}"
        left = left or goal
    return left


def main_search(options: SearchOptions) -> int:
    try:
        return run_search(options)
    except SearchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # between two steps: the manifest already says what finished
        print("\nsearch interrupted: finished candidates are kept; run the same command to resume", file=sys.stderr)
        return 130
    except ResultsWriteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the manifest itself: its last good state stays (benchmarks/search/manifest.py)
        where = f" ({exc.filename})" if exc.filename else ""
        print(
            f"error: could not write under {options.results_dir}{where}: {exc.strerror or exc}. The manifest keeps every"
            f" candidate finished before; {results.write_fix(exc)}, then run the same command to resume",
            file=sys.stderr,
        )
        return 1
