"""The staged search's building blocks and what each knob did (pure functions over candidates and manifest entries).

A full grid launches every layout with every combination of the axes' values: four flags of three values
on five layouts is 405 launches. The staged search spends launches where they can pay:
  stage 1: each layout on its own (declared) flags and environment;
  stage 2: on the best K layouts of stage 1 for each objective, each axis one value at a time;
  stage 3: on each of those layouts, each axis's best value for that objective together, kept only if it
           beats the layout's best of stages 1 and 2 by the clear margin (or, with --repeats, by separate
           intervals).
What to launch next is decided in one place, benchmarks/search/policy.py, from these.
Stage 2's candidates are known before any launch, so preflight and SGLang's checks judge them with
stage 1's; stage 3's are judged when they are known. Every stage resumes as the search does: a candidate
is named by its values, and stages 2 and 3 follow from the scores already recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks import repeats
from sglang_layout.candidates import Candidate, GridValue, distinct_axes, expand

STRATEGIES = ("staged", "grid")
STAGE_NAMES = {1: "the layouts", 2: "one axis at a time", 3: "the best values together"}


def strategy_for(asked: str, grid: Sequence[tuple[str, tuple[GridValue, ...]]]) -> str:
    """`--strategy`, or its default: staged when a grid is given (without one the two are the same)."""
    return asked or ("staged" if grid else "grid")


def first_stages(
    layouts: Mapping[str, Any], chosen: Sequence[str] | None, grid: Sequence[tuple[str, tuple[GridValue, ...]]]
) -> tuple[list[Candidate], list[Candidate]]:
    """Stage 1 (each layout alone) and every stage-2 candidate (each layout with one axis at one value).

    A value the layout already declares gives the layout itself again: it is left out (its effect is 0)."""
    bases = expand(layouts, chosen, [])
    distinct_axes(grid)  # the full grid's cap does not apply: stage 2 grows with the sum of the values, not their product
    by_layout = {base.layout: base for base in bases}
    singles = []
    for axis, values in grid:
        for candidate in expand(layouts, chosen, [(axis, values)]):
            if _server(candidate.entry) != _server(by_layout[candidate.layout].entry):
                singles.append(candidate)
    return bases, singles


def _server(entry: Any) -> Any:
    """What decides the server an entry starts: all of it but its description."""
    return {k: v for k, v in entry.items() if k != "description"} if isinstance(entry, Mapping) else entry


def objective_of(scores: Mapping[str, Any], objective: str) -> float | None:
    value = scores.get(objective)
    return float(value) if value else None


def unsettled(scores: Mapping[str, Any], objective: str) -> str | None:
    """Why the scores' figure on the objective is too noisy to judge (objectives.Objective.unsettled), or None."""
    return scores.get(f"{objective}_unsettled")


def top_layouts(entries: Sequence[Mapping[str, Any]], objective: str, k: int) -> list[str]:
    """The K layouts whose stage-1 candidate did best on the objective (the measured ones, best first)."""
    ranked = sorted(((value, layout) for layout, value in stage_one_scores(entries, objective).items()), reverse=True)
    return [layout for _, layout in ranked[:k]]


def stage_one_scores(entries: Sequence[Mapping[str, Any]], objective: str) -> dict[str, float]:
    """Each measured stage-1 layout's figure on the objective."""
    return {
        entry["layout"]: value
        for entry in entries
        if entry.get("stage") == 1
        and entry["status"] == "measured"
        and (value := objective_of(entry.get("scores") or {}, objective)) is not None
    }


def gain(mine: Mapping[str, Any], theirs: Mapping[str, Any], objective: str, clear_margin: float) -> tuple[bool, float]:
    """Whether `mine` clearly beats `theirs` on the objective (separate 95% intervals when both were repeated,
    else the clear margin; never where either figure is unsettled), and by how much."""
    now, was = objective_of(mine, objective), objective_of(theirs, objective)
    if now is None or was is None:
        return False, 0.0
    margin = now / was - 1
    if unsettled(mine, objective) or unsettled(theirs, objective):
        return False, margin
    intervals = mine.get(f"{objective}_ci"), theirs.get(f"{objective}_ci")
    if all(intervals):
        return margin > 0 and repeats.separated(*intervals), margin
    return margin >= clear_margin, margin


def best_values(entries: Sequence[Mapping[str, Any]], layout: str, objective: str, clear_margin: float) -> dict[str, GridValue]:
    """Per axis, the value that did best on `layout`, where it clearly beat the layout's own base."""
    base = _base(entries, layout)
    if base is None:
        return {}
    best: dict[str, tuple[float, GridValue]] = {}
    for entry in entries:
        if entry.get("stage") != 2 or entry["layout"] != layout or entry["status"] != "measured":
            continue
        ((axis, value),) = entry["overrides"].items()
        clear, margin = gain(entry.get("scores") or {}, base.get("scores") or {}, objective, clear_margin)
        if clear and (axis not in best or margin > best[axis][0]):
            best[axis] = (margin, value)
    return {axis: value for axis, (_, value) in sorted(best.items())}


def _base(entries: Sequence[Mapping[str, Any]], layout: str) -> Mapping[str, Any] | None:
    return next((e for e in entries if e["name"] == layout and e["layout"] == layout and e["status"] == "measured"), None)


def keep_combination(
    entries: Sequence[Mapping[str, Any]], combination: Mapping[str, Any], objective: str, clear_margin: float
) -> tuple[bool, str]:
    """Whether stage 3's candidate clearly beats the best of its layout's stage 1 and 2, and the sentence why."""
    layout = combination["layout"]
    rivals = [
        e
        for e in entries
        if e["layout"] == layout and e.get("stage") in (1, 2) and e["status"] == "measured"
        if objective_of(e.get("scores") or {}, objective) is not None
    ]
    mine = combination.get("scores") or {}
    if objective_of(mine, objective) is None:
        return False, f"not kept: no {objective} figure"
    if not rivals:
        return True, f"kept: nothing of {layout} measured to compare with"
    rival = max(rivals, key=lambda e: objective_of(e["scores"], objective) or 0.0)
    clear, margin = gain(mine, rival["scores"], objective, clear_margin)
    repeated = bool(mine.get(f"{objective}_ci") and rival["scores"].get(f"{objective}_ci"))
    noisy = unsettled(mine, objective) or unsettled(rival["scores"], objective)
    rule = (
        f"too few samples to judge ({noisy})"
        if noisy
        else "the 95% intervals separate"
        if repeated and clear
        else "the 95% intervals overlap"
        if repeated
        else (f"the clear margin is {100 * clear_margin:.0f}%")
    )
    said = f"{100 * margin:+.1f}% {objective} over {rival['name']} ({rival['label']}); {rule}"
    return clear, ("kept: " if clear else "not kept: ") + said


def effects(entries: Sequence[Mapping[str, Any]], objectives: Sequence[str]) -> list[dict[str, Any]]:
    """What each knob did: every measured candidate with values against its own layout's base, per objective.

    Each row: the layout, the values, the stage, and per objective the base's figure, the candidate's and
    the change as a fraction (None where either has no figure), why either figure is too noisy to judge
    (None where neither is); with --repeats, both intervals."""
    rows = []
    for entry in entries:
        if not entry.get("overrides") or entry["status"] != "measured":
            continue
        base = _base(entries, entry["layout"])
        if base is None:
            continue
        change = {}
        base_scores, scores = base.get("scores") or {}, entry.get("scores") or {}
        for objective in objectives:
            was, now = objective_of(base_scores, objective), objective_of(scores, objective)
            change[objective] = {
                "base": was,
                "value": now,
                "change": None if was is None or now is None else round(now / was - 1, 4),
                "unsettled": unsettled(base_scores, objective) or unsettled(scores, objective),
                "intervals": [
                    (base.get("scores") or {}).get(f"{objective}_ci"),
                    (entry.get("scores") or {}).get(f"{objective}_ci"),
                ],
            }
        rows.append(
            {
                "name": entry["name"],
                "layout": entry["layout"],
                "values": dict(entry["overrides"]),
                "stage": entry.get("stage"),
                "kept": entry.get("kept", True),
                "objectives": change,
            }
        )
    return rows


def full_grid_size(layout_count: int, grid: Sequence[tuple[str, tuple[GridValue, ...]]]) -> int:
    """How many candidates `--strategy grid` would have: each layout with every combination."""
    size = layout_count
    for _, values in grid:
        size *= len(values)
    return size
