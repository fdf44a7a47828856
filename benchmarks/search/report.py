"""The search's report: a table of every candidate, the winner per objective, the winner as a ready
sglang_layouts entry, as text, Markdown and a PNG of the curves."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from benchmarks.search import objectives, stages
from sglang_layout import tables

HEADER = (
    "candidate",
    "what",
    "status",
    "load s",
    "GPU GiB",
    "tok/s C=1",
    "peak agg tok/s",
    "at C",
    "capacity tok/s",
    "at C",
    "levels",
    "note",
)


def _note(entry: dict[str, Any], width: int) -> str:
    stage = f"stage {entry['stage']}: " if entry.get("stage") else ""
    if entry["status"] in ("refused", "skipped"):
        return _cut(stage + f"{entry['status']}: " + "; ".join(entry.get("reasons") or []), width)
    if entry.get("error"):
        return _cut(stage + str(entry["error"]).splitlines()[0], width)
    if entry.get("same_server_as"):
        return _cut(stage + f"the same server as {entry['same_server_as']} (SGLang's resolved arguments): not launched", width)
    kept = "" if entry.get("kept", True) else f"; {entry.get('kept_why') or 'not kept'}"
    earlier = " (kept from an earlier run)" if entry.get("kept_from_earlier_run") else ""
    return _cut(stage + (entry.get("stopped") or "") + kept + earlier, width)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _capacity_at(scores: dict[str, Any]) -> str:
    """`16 (<24)`: the highest C within the SLO and the lowest measured C that broke it."""
    _, high = scores.get("capacity_bracket") or (None, None)
    if scores.get("capacity_c") is None:
        return "-" if high is None else f"none (<{high})"
    return f"{scores['capacity_c']}" + (f" (<{high})" if high is not None else "")


def rows(state: dict[str, Any], note_width: int = 10_000) -> list[list[str]]:
    num = tables.number
    out = []
    for entry in state["candidates"]:
        scores = entry.get("scores") or {}
        out.append(
            [
                entry["name"],
                entry.get("label", ""),
                entry["status"],
                num(entry.get("load_s")),
                num(entry["gpu_used_mib"] / 1024 if entry.get("gpu_used_mib") else None),
                num(scores.get("c1")),
                num(scores.get("peak")),
                str(scores.get("peak_c") or "-"),
                num(scores.get("capacity")),
                _capacity_at(scores),
                ",".join(map(str, entry.get("levels_run") or [])) or "-",
                _note(entry, note_width),
            ]
        )
    return out


def winner_entry(state: dict[str, Any], entries: dict[str, Any]) -> str:
    """The winner of the search's objective as YAML to paste under sglang_layouts in group_vars."""
    best = (state.get("winners") or {}).get(state["objective"]) or next(iter((state.get("winners") or {}).values()), None)
    if not best or best["name"] not in entries:
        return ""
    return yaml.safe_dump({"sglang_layouts": {best["name"]: entries[best["name"]]}}, sort_keys=False, width=120)


def counts(state: dict[str, Any]) -> dict[str, int]:
    """What the search spent: launches, refusals, twins never launched, candidates left out by the budget, levels
    measured of those planned (kept in the manifest as `launches`, said by `economy`)."""
    entries = state["candidates"]
    launched = [e for e in entries if e["status"] not in ("refused", "pending", "skipped") and not e.get("same_server_as")]
    return {
        "launched": len(launched),
        "refused": sum(1 for e in entries if e["status"] == "refused"),
        "same_server": sum(1 for e in entries if e.get("same_server_as")),
        "over_budget": sum(1 for e in entries if e["status"] == "skipped" and "--budget" in " ".join(e.get("reasons") or [])),
        "levels_measured": sum(len(e.get("levels_run") or []) for e in launched),
        "levels_planned": len(state["workload"]["levels"]) * len(launched),
        "full_grid": int(state.get("full_grid") or 0),
    }


def effects(state: dict[str, Any]) -> list[dict[str, Any]]:
    """What each knob did against its layout's base, for the objectives reported (kept in the manifest)."""
    return stages.effects(state["candidates"], _objectives(state))


def economy(state: dict[str, Any]) -> str:
    """What the search spent and saved: launches, levels, wall time, its own overhead per candidate."""
    spent = counts(state)
    launched = [
        e for e in state["candidates"] if e["status"] not in ("refused", "pending", "skipped") and not e.get("same_server_as")
    ]
    twins, over = spent["same_server"], spent["over_budget"]
    overheads = [e["overhead_s"] for e in launched if e.get("overhead_s") is not None]
    parts = [
        f"{spent['launched']} launched, {spent['refused']} refused by preflight (never launched)"
        + (f", {twins} the same server as one measured (never launched)" if twins else "")
        + (f", {over} left out by the --budget (listed above; the same command resumes them)" if over else ""),
        f"{spent['levels_measured']} of {spent['levels_planned']} levels measured (the rest skipped past the knee or the SLO)",
    ]
    if state.get("strategy") == "staged":
        parts.append(f"staged: {len(launched)} launches where the full grid has {state.get('full_grid', '?')} candidates")
    if state.get("wall_s"):
        parts.append(f"wall time {state['wall_s']:.0f} s")
    if overheads:
        parts.append(f"the search's own overhead {sum(overheads) / len(overheads):.1f} s per candidate beyond load and Locust")
    return "; ".join(parts)


def sglang_lines(state: dict[str, Any], per_candidate: int = 6, plain_listed: int = 8) -> list[str]:
    """The installed SGLang's own verdict per candidate: what it will really run, and where it and ours differ.

    Candidates it takes as written, where ours agree, are summed up in one line (a staged search has many); so
    are those ours refuse for what fails only at load (sglang_layout.oracle.AT_LOAD_RULES), which its argument
    checks cannot see; a real disagreement is one line per layout and verdict, however many grid points share it.
    """
    rewritten, plain, at_load = [], [], {}
    disagreeing: dict[tuple[str, str], list[str]] = {}
    for entry in state["candidates"]:
        said = entry.get("sglang")
        if not said:
            continue
        if said["accepted"] and said["agrees_with_ours"] and entry.get("status") == "refused":
            at_load.setdefault(entry["layout"], []).append(entry["name"])
            continue
        if said["accepted"] and said["agrees_with_ours"] and not said["resolved"]:
            plain.append(entry["name"])
            continue
        verdict = "accepts" if said["accepted"] else f"refuses ({said['refusal']})"
        if not said["agrees_with_ours"]:
            disagreeing.setdefault((entry["layout"], f"SGLang {said['version']} {verdict}"), []).append(entry["name"])
            continue
        rewritten.append(f"{entry['name']}: SGLang {said['version']} {verdict}")
        rewritten += [f"  {line}" for line in said["resolved"][:per_candidate]]
        if len(said["resolved"]) > per_candidate:
            rewritten.append(f"  ... and {len(said['resolved']) - per_candidate} more")
    out = []
    for (layout, verdict), names in disagreeing.items():
        which = names[0] if len(names) == 1 else f"{layout} ({len(names)} candidates: {_listed(names, plain_listed)})"
        out.append(f"{which}: {verdict}; our rules judged it otherwise (rule for review)")
    out += rewritten
    if at_load:
        grouped = ", ".join(f"{layout} ({len(names)})" if len(names) > 1 else names[0] for layout, names in at_load.items())
        out.append(f"refused by our rules for a failure at load, which SGLang's argument checks do not reach: {grouped}")
    if plain:
        out.append(f"taken as written, as ours judged them: {_listed(plain, plain_listed)}")
    return out


def _listed(names: list[str], shown: int) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


EFFECT_HEADER = ("candidate", "layout", "values", "stage")


def _objectives(state: dict[str, Any]) -> list[str]:
    asked = objectives.asked(state)
    return [objective for objective in objectives.OBJECTIVES if asked.get(objective, True)]


def _change(figure: dict[str, Any]) -> str:
    if figure["change"] is None:
        return "-"
    intervals = figure.get("intervals") or [None, None]
    said = f"{100 * figure['change']:+.1f}%"
    if figure.get("unsettled"):
        return said + " (too few samples)"
    return said + (" (intervals overlap)" if all(intervals) and not _apart(intervals) else "")


def _apart(intervals: list[Any]) -> bool:
    (low_a, high_a), (low_b, high_b) = intervals
    return low_a > high_b or low_b > high_a


def effect_rows(state: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """What each knob did: each candidate with values against the same layout's base, per objective."""
    wanted = _objectives(state)
    header = [*EFFECT_HEADER, *(f"{objective} change" for objective in wanted), "kept"]
    out = []
    for row in effects(state):
        values = ", ".join(f"{axis}={value}" for axis, value in row["values"].items())
        changes = [_change(row["objectives"][objective]) for objective in wanted]
        out.append([row["name"], row["layout"], values, str(row["stage"] or "-"), *changes, "yes" if row["kept"] else "no"])
    return header, out


# SGLang's startup phases, each ending at a line it logs (plugins/module_utils/sglang_host.py STARTUP_MARKS).
STARTUP_PHASES = {"weights_loaded": "weights", "kv_cache_sized": "KV cache", "graphs_captured": "graphs", "ready": "ready"}


def startup_text(startup: dict[str, float]) -> str:
    """`weights 212 s, KV cache +4 s, graphs +205 s, ready +3 s`: each phase's own time, from the unit's start."""
    parts, before = [], 0.0
    for phase, label in STARTUP_PHASES.items():
        if phase in startup:
            took = startup[phase] - before
            parts.append(f"{label} {'+' if parts else ''}{took:.1f} s")
            before = startup[phase]
    return ", ".join(parts)


def startup_lines(state: dict[str, Any]) -> list[str]:
    """Where each launch's start went, from SGLang's own lines, and their mean: what a launch costs on this box."""
    launched = [e for e in state["candidates"] if e.get("startup") and not e.get("same_server_as")]
    lines = [f"{e['name']}: {startup_text(e['startup'])}" for e in launched]
    ready = [e["startup"]["ready"] for e in launched if "ready" in e["startup"]]
    if len(ready) > 1:
        lines.append(f"mean start to ready: {sum(ready) / len(ready):.1f} s over {len(ready)} launches")
    return lines


def held_back_lines(state: dict[str, Any]) -> list[str]:
    """What held each measured candidate back at its peak level, and where one hung (benchmarks/bottleneck.py)."""
    lines = []
    for e in state["candidates"]:
        if e.get("held_back"):
            lines.append(f"{e['name']} (C={e['held_back']['level']}): {e['held_back']['name']}: {e['held_back']['evidence']}")
        if e.get("hung"):
            lines.append(f"{e['name']} (C={e['hung']['level']}): {e['hung'].get('name')}: {e['hung'].get('evidence')}")
    return lines


def text(state: dict[str, Any], entries: dict[str, Any]) -> str:
    lines = [f"\nsearch {state['id']} on {state['host']}", tables.text_table(HEADER, rows(state, note_width=70)), economy(state)]
    header, effect = effect_rows(state)
    if effect:
        lines += ["", "what each knob did (against the same layout on its declared flags):", tables.text_table(header, effect)]
    if said := sglang_lines(state, per_candidate=3):
        lines += ["", "what the installed SGLang will really run (its own checks, before any launch):", *said]
    if held := held_back_lines(state):
        lines += ["", "what held each candidate back at its peak level:", *held]
    if started := startup_lines(state):
        lines += ["", "where each start went (SGLang's own log lines, from the unit's start):", *started]
    winners = state.get("winners") or {}
    lines.append("")
    asked = objectives.asked(state)
    for objective in objectives.OBJECTIVES:
        if objective in winners:
            lines.append("winner " + winners[objective]["sentence"])
        elif asked.get(objective, True):
            lines.append(f"winner {objective}: none (no candidate gave this figure)")
    entry = winner_entry(state, entries)
    if entry:
        lines += ["", f"the {state['objective']} winner, ready for group_vars:", entry.rstrip()]
    lines.append(f"serving now: {state.get('serving_at_end', '-')}")
    return "\n".join(lines)


def markdown(state: dict[str, Any], entries: dict[str, Any], plot: Path | None) -> str:
    winners = state.get("winners") or {}
    parts = [
        f"# Layout search {state['id']} on {state['host']}\n",
        f"Workload: levels {state['workload']['levels']}, {state['workload']['endpoint']} endpoint, "
        f"{state['workload']['input_tokens']} tokens in, {state['workload']['output_tokens']} out; knee "
        f"{100 * state['knee']:.0f}%; objective {state['objective']}.\n",
        tables.markdown_table(HEADER, rows(state)),
        economy(state) + ".\n",
        "## Winners\n",
    ]
    parts += [f"- {winners[o]['sentence']}" for o in objectives.OBJECTIVES if o in winners]
    header, effect = effect_rows(state)
    if effect:
        parts += ["", "## What each knob did\n", "Against the same layout on its declared flags and environment.\n"]
        parts.append(tables.markdown_table(header, effect))
    if said := sglang_lines(state):
        parts += ["", "## What the installed SGLang will really run\n", "```text", *said, "```"]
    if held := held_back_lines(state):
        parts += ["", "## What held each candidate back\n", "At its peak level, by the rules of docs/benchmarks.md.\n"]
        parts += [f"- {line}" for line in held]
    if started := startup_lines(state):
        parts += ["", "## Where each start went\n", "From SGLang's own log lines, in seconds from the unit's start.\n"]
        parts += [f"- {line}" for line in started]
    entry = winner_entry(state, entries)
    if entry:
        parts += ["", "## The winner as a declaration\n", "```yaml", entry.rstrip(), "```"]
    if plot:
        parts += ["", f"![curves]({plot.name})"]
    return "\n".join(parts) + "\n"


def plot(state: dict[str, Any], path: Path) -> Path | None:
    """Aggregate tok/s against C per candidate; tok/s per request against aggregate with the Pareto front; load times."""
    measured = [e for e in state["candidates"] if e.get("curve")]
    if not measured:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    effect = stages.effects(state["candidates"], ["c1", "peak"])
    telemetry = [e for e in measured if e.get("gpu_curve")]
    count = 3 + bool(effect) + bool(telemetry)
    figure, panels = plt.subplots(1, count, figsize=(5.8 * count, 5))
    curves, trade, loads = panels[:3]
    points = []
    for entry in measured:
        cs, agg, per = zip(*entry["curve"], strict=True)
        curves.plot(cs, agg, marker="o", label=entry["name"])
        trade.plot(agg, per, marker="o", label=entry["name"])
        points += [(f"{entry['name']} C={c}", a, p) for c, a, p in entry["curve"]]
    front = objectives.pareto_front(points)
    trade.plot(
        [a for _, a, _ in front], [p for _, _, p in front], color="black", linestyle="--", linewidth=1, label="Pareto front"
    )
    curves.set(xscale="log", xlabel="concurrency C", ylabel="aggregate output tok/s", title="throughput")
    trade.set(xlabel="aggregate output tok/s", ylabel="tok/s per request (p50)", title="per request vs aggregate")
    loaded = [e for e in state["candidates"] if e.get("load_s")]
    loads.barh([e["name"] for e in loaded], [e["load_s"] for e in loaded])
    loads.set(xlabel="seconds", title="load time (start to healthy)")
    for axes in (curves, trade):
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    if effect:
        _plot_effects(panels[3], effect)
    if telemetry:
        _plot_gpus(panels[-1], telemetry)
    figure.tight_layout()
    partial = path.with_name(f".partial-{path.name}")
    figure.savefig(partial, dpi=100, format="png")
    plt.close(figure)
    os.replace(partial, path)
    return path


def _plot_effects(axes: Any, effect: list[dict[str, Any]]) -> None:
    """Each knob's change in tok/s at C=1 and at peak against its layout's base, as bars."""
    labels = [f"{row['layout']} " + ", ".join(f"{k}={v}" for k, v in row["values"].items()) for row in effect]
    for offset, objective in ((-0.2, "c1"), (0.2, "peak")):
        changes = [100 * (row["objectives"][objective]["change"] or 0.0) for row in effect]
        axes.barh([i + offset for i in range(len(effect))], changes, height=0.4, label=objective)
    axes.set_yticks(range(len(effect)), labels, fontsize=7)
    axes.axvline(0, color="black", linewidth=0.8)
    axes.set(xlabel="% against the same layout's base", title="what each knob did")
    axes.legend(fontsize=8)


def _plot_gpus(axes: Any, measured: list[dict[str, Any]]) -> None:
    """The busiest GPU's SM busy % against C per candidate, beside the throughput curves."""
    for entry in measured:
        cs, sm, _ = zip(*entry["gpu_curve"], strict=True)
        axes.plot(cs, sm, marker="o", label=entry["name"])
    axes.set(xscale="log", xlabel="concurrency C", ylabel="SM busy % (busiest GPU, median)", title="what the GPUs did")
    axes.set_ylim(0, 100)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)


def write(state: dict[str, Any], manifest_path: Path, entries: dict[str, Any]) -> dict[str, Path]:
    """The Markdown report and the PNG beside the manifest (results/<host>/searches/<id>.md, .png)."""
    png = plot(state, manifest_path.with_suffix(".png"))
    md = manifest_path.with_suffix(".md")
    partial = md.with_name(f".partial-{md.name}")
    partial.write_text(markdown(state, entries, png))
    os.replace(partial, md)
    return {"markdown": md, **({"plot": png} if png else {})}
