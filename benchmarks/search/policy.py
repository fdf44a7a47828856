"""The staged strategy as one pure policy: what was measured in, what to launch next out.

The live search (benchmarks/search/runner.py) and the strategy evaluator (benchmarks/search/evaluate.py)
both ask `next_step` what to do, with the manifest's entries as the state; a resumed search asks again
and gets the same answer. One incumbent per objective: stage 2 varies each axis on the best `top`
layouts of *every* objective the search reports (a layout best for both is varied once), and stage 3
combines, per objective, the values that clearly helped that objective.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.search import stages
from sglang_layout.candidates import Candidate, GridValue, expand

Entry = Mapping[str, Any]


@dataclass(frozen=True)
class Policy:
    top: int = 2  # stage 2 varies the axes on this many of the best layouts, per objective
    clear_margin: float = 0.05
    objectives: tuple[str, ...] = ("c1", "peak")  # the objectives the search reports, each with its incumbent
    # Stage 3 combines the values that gained at least this much alone (None: the clear margin); the
    # combination is kept only where it clearly beats its parts.
    combine_margin: float | None = None

    @property
    def combining(self) -> float:
        return self.clear_margin if self.combine_margin is None else self.combine_margin


@dataclass(frozen=True)
class Step:
    """What to do next: launch `launch` (known candidates, by name) and `new` (candidates this stage made).

    stage 0: nothing left; the search is done. `explored` says, per objective, the layouts this stage
    works on for it; `skip` names the stage-2 candidates left out, with why."""

    stage: int
    launch: list[str] = field(default_factory=list)
    new: list[Candidate] = field(default_factory=list)
    explored: dict[str, list[str]] = field(default_factory=dict)
    skip: dict[str, str] = field(default_factory=dict)


def ranked_objectives(entries: Sequence[Entry], policy: Policy) -> list[str]:
    """The policy's objectives that stage 1 gave a figure for (capacity has none without an SLO)."""
    given = [
        objective
        for objective in policy.objectives
        if any(stages.objective_of(e.get("scores") or {}, objective) for e in entries if e.get("stage") == 1)
    ]
    return given or ["peak"]


def incumbents(entries: Sequence[Entry], policy: Policy) -> dict[str, list[str]]:
    """Per objective, the best `top` layouts of stage 1 (best first).

    A layout an earlier objective already varies is taken in place of one it ties with (within the clear
    margin): two layouts on one clock (ep8 and a variant that changes nothing) are not each some objective's
    incumbent by noise alone, and varied twice (bin/rehearse, 7 Dec 2026)."""
    measured = {e["layout"]: e.get("scores") or {} for e in entries if e.get("stage") == 1 and e["status"] == "measured"}
    chosen: dict[str, list[str]] = {}
    for objective in ranked_objectives(entries, policy):
        varied = [layout for picks in chosen.values() for layout in picks]
        picks: list[str] = []
        for layout in stages.top_layouts(entries, objective, policy.top):
            if layout not in varied:  # a varied layout it ties with instead
                mine = measured[layout]
                layout = next(
                    (o for o in varied if o not in picks and _ties(mine, measured[o], objective, policy.clear_margin)), layout
                )
            if layout not in picks:
                picks.append(layout)
        chosen[objective] = picks
    return chosen


def _ties(mine: Mapping[str, Any], theirs: Mapping[str, Any], objective: str, margin: float) -> bool:
    """Whether `mine` fails to beat `theirs` clearly (stages.gain), both having a figure on the objective."""
    return stages.objective_of(theirs, objective) is not None and not stages.gain(mine, theirs, objective, margin)[0]


def _pending(entries: Sequence[Entry], stage: int, layouts: set[str] | None = None) -> list[str]:
    return [
        e["name"]
        for e in entries
        if e.get("stage") == stage and e["status"] in ("pending", "skipped") and (layouts is None or e["layout"] in layouts)
    ]


def combinations(
    layouts: Mapping[str, Any], entries: Sequence[Entry], tops: Mapping[str, Sequence[str]], margin: float
) -> dict[str, tuple[Candidate, list[str]]]:
    """Stage 3: per objective, each of its top layouts with every axis's best value for it at once (where two
    axes or more gained at least `margin`); by name, with the objectives it was built for."""
    found: dict[str, tuple[Candidate, list[str]]] = {}
    for objective, top in tops.items():
        for layout in top:
            values = stages.best_values(entries, layout, objective, margin)
            if len(values) < 2:
                continue
            grid: list[tuple[str, tuple[GridValue, ...]]] = [(axis, (value,)) for axis, value in values.items()]
            (candidate,) = expand({layout: layouts[layout]}, [layout], grid)
            if candidate.name in found:
                found[candidate.name][1].append(objective)
            else:
                found[candidate.name] = (candidate, [objective])
    return found


def next_step(layouts: Mapping[str, Any], entries: Sequence[Entry], policy: Policy) -> Step:
    """What a staged search launches next, from its entries (each with name, layout, overrides, stage, status, scores).

    Stage 1's and 2's candidates are in the entries from the start (preflight judges them at once); stage 3's
    are made here, once stage 2 has measured."""
    first = [e["name"] for e in entries if e.get("stage") == 1 and e["status"] == "pending"]
    if first:
        return Step(stage=1, launch=first)
    tops = incumbents(entries, policy)
    varied = {layout for top in tops.values() for layout in top}
    refused = {e["layout"] for e in entries if e.get("stage") == 1 and e["status"] == "refused"}
    skip = {}
    for e in entries:
        if e.get("stage") == 2 and e["status"] in ("pending", "skipped") and e["layout"] not in varied | refused:
            said = "; ".join(f"{objective}: {', '.join(top) or 'none'}" for objective, top in tops.items())
            skip[e["name"]] = f"stage 2 varies the best {policy.top} layouts per objective only ({said})"
    second = [name for name in _pending(entries, 2, varied - refused)]
    if second:
        return Step(stage=2, launch=second, explored=tops, skip=skip)
    made = combinations(layouts, entries, tops, policy.combining)
    known = {e["name"] for e in entries}
    new = [candidate for name, (candidate, _) in made.items() if name not in known]
    third = [e["name"] for e in entries if e.get("stage") == 3 and e["status"] == "pending"]
    if new or third:
        built = {objective: [c.layout for c, why in made.values() if objective in why] for objective in tops}
        return Step(stage=3, launch=third, new=new, explored=built, skip=skip)
    return Step(stage=0, skip=skip)


def built_for(layouts: Mapping[str, Any], entries: Sequence[Entry], name: str, policy: Policy) -> list[str]:
    """The objectives a stage-3 candidate was made for (from stage 2's scores, as when it was made)."""
    made = combinations(layouts, entries, incumbents(entries, policy), policy.combining)
    return made[name][1] if name in made else list(ranked_objectives(entries, policy))


def keep(entries: Sequence[Entry], combination: Entry, objectives: Sequence[str], clear_margin: float) -> tuple[bool, str]:
    """A stage-3 candidate is kept when it clearly beats its layout's best of stages 1 and 2 on an objective
    it was made for; the sentences why, per objective."""
    said = [(objective, *stages.keep_combination(entries, combination, objective, clear_margin)) for objective in objectives]
    kept = any(ok for _, ok, _ in said)
    why = "; ".join(f"{objective} {text.split(': ', 1)[1]}" for objective, _, text in said)
    return kept, ("kept: " if kept else "not kept: ") + why
