"""Which candidate wins an objective, decided as a user adopts it (pure functions over manifest entries).

Two decisions, each with its own "clear":
  the layout: the winner against the best candidate of any other layout;
  the knobs:  the winner against its own layout on its declared flags (the plain layout).
Ties go to the plainer server. A candidate with knobs counts only where it clearly beat its plain layout
(a knob that did nothing beyond the noise is not adopted); among the candidates left, those within the
noise of the best tie, and the one with the fewest knobs wins (the plain layout when it is among them),
then the higher figure. vLLM's `bench sweep` settles its ties the same way: fewer overrides win.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.search import stages
from benchmarks.search.objectives import OBJECTIVES
from benchmarks.search.stages import objective_of
from sglang_layout.candidates import value_text

Entry = Mapping[str, Any]


def figure(entry: Entry, objective: str) -> float | None:
    return objective_of(entry.get("scores") or {}, objective)


def gain(mine: Entry, theirs: Entry, objective: str, clear_margin: float) -> tuple[bool, float]:
    """Whether candidate `mine` clearly beats `theirs` on the objective, and by how much (benchmarks/search/stages.py)."""
    return stages.gain(mine.get("scores") or {}, theirs.get("scores") or {}, objective, clear_margin)


def knobs_text(overrides: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value_text(value)}" for key, value in overrides.items())


@dataclass(frozen=True)
class Decision:
    objective: str
    name: str
    layout: str
    value: float
    overrides: dict[str, Any]
    runner_up: str | None  # the best candidate of any other layout
    margin: float | None  # winner / runner-up - 1
    clear: bool  # the layout decision
    knobs: str  # the knob decision, in words
    tied: list[tuple[str, float]] = field(default_factory=list)  # within the noise of the winner: (name, change)
    unsettled: str | None = None  # why the figures are too noisy to call the layout clear (the winner's or rival's)

    def sentence(self) -> str:
        what = OBJECTIVES[self.objective].description
        shown = f"{self.value:,.1f}" if self.value >= 10 else f"{self.value:.3g}"  # tokens per joule are below 1
        head = f"{self.objective}: {self.name} ({what} {shown})"
        if self.runner_up is None:
            layout = "the only layout measured"
        else:
            noise = f"too few samples ({self.unsettled})" if self.unsettled else "within the noise margin"
            verdict = "clear" if self.clear else f"not clear: {noise}"
            layout = f"{100 * (self.margin or 0):+.1f}% over {self.runner_up} ({verdict})"
        said = f"{head}, {layout}; {self.knobs}"
        if self.tied:
            shown = ", ".join(f"{name} {100 * change:+.1f}%" for name, change in self.tied[:3])
            more = f" and {len(self.tied) - 3} more" if len(self.tied) > 3 else ""
            said += f"; tied within the noise: {shown}{more}"
        return said


def decide(entries: Sequence[Entry], objective: str, clear_margin: float) -> Decision | None:
    """The objective's winner among the measured candidates (stage-3 combinations not kept are out), or None."""
    measured = [e for e in entries if e["status"] == "measured" and e.get("kept", True) and figure(e, objective) is not None]
    if not measured:
        return None
    plain = {e["layout"]: e for e in measured if not e.get("overrides")}

    def adoptable(entry: Entry) -> bool:
        base = plain.get(entry["layout"])
        return not entry.get("overrides") or base is None or gain(entry, base, objective, clear_margin)[0]

    pool = [e for e in measured if adoptable(e)]
    best = max(pool, key=lambda e: figure(e, objective) or 0.0)
    tying = [e for e in pool if e is best or not gain(best, e, objective, clear_margin)[0]]
    won = min(tying, key=lambda e: (len(e.get("overrides") or {}), -(figure(e, objective) or 0.0), e["name"]))
    value = figure(won, objective) or 0.0

    others = [e for e in measured if e["layout"] != won["layout"]]
    rival = max(others, key=lambda e: figure(e, objective) or 0.0, default=None)
    clear, margin = gain(won, rival, objective, clear_margin) if rival else (True, None)

    tied = sorted(
        (
            (e["name"], (figure(e, objective) or 0.0) / value - 1)
            for e in measured
            if e is not won and not gain(e, won, objective, clear_margin)[0] and not gain(won, e, objective, clear_margin)[0]
        ),
        key=lambda pair: -pair[1],
    )
    return Decision(
        objective=objective,
        name=won["name"],
        layout=won["layout"],
        value=value,
        overrides=dict(won.get("overrides") or {}),
        runner_up=rival["name"] if rival else None,
        margin=margin,
        clear=clear,
        knobs=_knobs(won, plain.get(won["layout"]), measured, objective, clear_margin),
        tied=tied,
        unsettled=next(filter(None, (stages.unsettled(e.get("scores") or {}, objective) for e in (won, rival) if e)), None),
    )


def _knobs(won: Entry, base: Entry | None, measured: Sequence[Entry], objective: str, clear_margin: float) -> str:
    layout = won["layout"]
    if won.get("overrides"):
        if base is None:
            return f"knobs: {knobs_text(won['overrides'])} (plain {layout} not measured to compare)"
        _, margin = gain(won, base, objective, clear_margin)
        return f"knobs: {knobs_text(won['overrides'])}, {100 * margin:+.1f}% over plain {layout} (clear)"
    if any(e["layout"] == layout and e.get("overrides") for e in measured):
        return f"knobs: none beat plain {layout} beyond the noise"
    return f"knobs: none tried on {layout}"
