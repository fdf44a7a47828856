"""How often a search strategy misses, measured on generated boxes (a benchmark command, not a test).

    python -m benchmarks.search.evaluate --boxes 1000 --seed 1 --cv 0.02

Each box has a hidden truth: layouts with their C=1 and peak figures (some refused), axes of values whose
effects differ by objective and by layout (an effect on the peak only is one that pays above a concurrency),
pairs of values that interact, and measurement noise of a given coefficient of variation. Every strategy runs
through the live search's own policy (benchmarks/search/policy.py) and winner rule (decision.py) against a
simulated measurement, and is scored per objective against the exhaustive best of the box's whole space
(every layout with every combination, each axis also at its declared default):
  within 5%    boxes whose winner's true figure is within 5% of the exhaustive best;
  regret       1 - true(winner) / true(best): median and 95th percentile;
  false clear  a winner said to be clear whose rival is truly as good, or a winner with a knob that truly
               adds nothing to it, 0.1% or less (a noise-level knob counts as a false winner);
  launches     servers started, as a share of the whole space.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.search import decision, policy
from sglang_layout import tables
from sglang_layout.candidates import candidate_name

OBJECTIVES = ("c1", "peak")
NOTHING = 1.001  # a knob adding 0.1% or less adds nothing
Key = tuple[str, int]  # (axis, value)


@dataclass(frozen=True)
class Effect:
    factors: dict[str, float]  # objective -> its factor
    layouts: frozenset[str] | None = None  # None: every layout


@dataclass
class Box:
    """A generated box: the truth the strategies do not see."""

    layouts: list[str]
    refused: set[str]
    axes: list[tuple[str, tuple[int, ...]]]
    base: dict[str, dict[str, float]]
    effects: dict[Key, Effect]
    pairs: dict[frozenset[Key], dict[str, float]] = field(default_factory=dict)

    def truth(self, layout: str, overrides: dict[str, Any]) -> dict[str, float]:
        keys = [(axis, value) for axis, value in overrides.items()]
        figures = dict(self.base[layout])
        for key in keys:
            effect = self.effects.get(key)
            if effect and (effect.layouts is None or layout in effect.layouts):
                for objective, factor in effect.factors.items():
                    figures[objective] *= factor
        for pair, factors in self.pairs.items():
            if pair <= set(keys):
                for objective, factor in factors.items():
                    figures[objective] *= factor
        return figures

    def space(self) -> list[tuple[str, dict[str, int]]]:
        """Every layout that is not refused with every combination, each axis also at its default (absent)."""
        options = [[None, *values] for _, values in self.axes]
        names = [axis for axis, _ in self.axes]
        out = []
        for layout in self.layouts:
            if layout in self.refused:
                continue
            for combo in itertools.product(*options):
                out.append((layout, {n: v for n, v in zip(names, combo, strict=True) if v is not None}))
        return out


def generate(rng: random.Random) -> Box:
    """One box: 3-6 layouts (15% refused each), 2-3 axes of 1-3 values; about half the values do nothing."""
    layouts = [f"L{i}" for i in range(rng.randint(3, 6))]
    refused = {layout for layout in layouts[1:] if rng.random() < 0.15}
    base = {layout: {"c1": rng.uniform(20.0, 80.0), "peak": rng.uniform(300.0, 2000.0)} for layout in layouts}
    axes = [(f"k{i}", tuple(range(1, rng.randint(1, 3) + 1))) for i in range(rng.randint(2, 3))]
    effects: dict[Key, Effect] = {}
    for axis, values in axes:
        for value in values:
            if rng.random() < 0.5:
                continue
            kind = rng.choices(["peak", "c1", "both"], weights=[2, 1, 1])[0]
            factors = {
                objective: min(max(rng.gauss(1.04, 0.1), 0.7), 1.4) for objective in OBJECTIVES if kind in (objective, "both")
            }
            where = frozenset(rng.sample(layouts, rng.randint(1, 2))) if rng.random() < 0.5 else None
            effects[(axis, value)] = Effect(factors, where)
    pairs = {}
    if rng.random() < 0.3 and len(axes) > 1:
        first, second = rng.sample(axes, 2)
        pair = frozenset({(first[0], rng.choice(first[1])), (second[0], rng.choice(second[1]))})
        pairs[pair] = {objective: rng.uniform(0.85, 1.15) for objective in OBJECTIVES}
    return Box(layouts, refused, axes, base, effects, pairs)


class Measurer:
    """The simulated launch: each candidate started once, its figures the truth times noise."""

    def __init__(self, box: Box, cv: float, rng: random.Random) -> None:
        self.box, self.cv, self.rng = box, cv, rng
        self.launched: dict[str, dict[str, float]] = {}

    def __call__(self, layout: str, overrides: dict[str, Any]) -> dict[str, float]:
        name = candidate_name(layout, overrides)
        if name not in self.launched:
            truth = self.box.truth(layout, overrides)
            self.launched[name] = {o: v * max(1.0 + self.rng.gauss(0.0, self.cv), 0.01) for o, v in truth.items()}
        return self.launched[name]


def _entry(layout: str, overrides: dict[str, Any], stage: int, status: str = "pending") -> dict[str, Any]:
    name = candidate_name(layout, overrides)
    return {"name": name, "layout": layout, "overrides": dict(overrides), "stage": stage, "status": status, "label": name}


def _measure_into(entry: dict[str, Any], measure: Measurer) -> None:
    entry.update(status="measured", scores=dict(measure(entry["layout"], entry["overrides"])))


def staged(box: Box, measure: Measurer, rules: policy.Policy) -> list[dict[str, Any]]:
    """The live search's staged strategy, step by step through its policy."""
    layouts: dict[str, Any] = {layout: {} for layout in box.layouts}
    entries = [_entry(layout, {}, 1, "refused" if layout in box.refused else "pending") for layout in box.layouts]
    entries += [
        _entry(layout, {axis: value}, 2, "refused" if layout in box.refused else "pending")
        for layout in box.layouts
        for axis, values in box.axes
        for value in values
    ]
    for _ in range(10):  # three stages; a bound, not a count
        step = policy.next_step(layouts, entries, rules)
        for entry in entries:
            if entry["name"] in step.skip:
                entry["status"] = "skipped"
        if step.stage == 0:
            break
        by_name = {e["name"]: e for e in entries}
        for candidate in step.new:
            entries.append(_entry(candidate.layout, candidate.overrides, 3))
            by_name[candidate.name] = entries[-1]
        for name in [*step.launch, *(c.name for c in step.new)]:
            _measure_into(by_name[name], measure)
        for entry in entries:
            if entry.get("stage") == 3 and entry["status"] == "measured" and "kept" not in entry:
                made_for = policy.built_for(layouts, entries, entry["name"], rules)
                entry["kept"] = policy.keep(entries, entry, made_for, rules.clear_margin)[0]
    return entries


def grid(box: Box, measure: Measurer, rules: policy.Policy) -> list[dict[str, Any]]:
    """Every candidate of the space."""
    entries = [_entry(layout, overrides, 1) for layout, overrides in box.space()]
    for entry in entries:
        _measure_into(entry, measure)
    return entries


def random_at(launches: int, seed: int) -> Callable[[Box, Measurer, policy.Policy], list[dict[str, Any]]]:
    """`launches` candidates of the space drawn at random (every plain layout among them, as a user would start)."""

    def run(box: Box, measure: Measurer, rules: policy.Policy) -> list[dict[str, Any]]:
        space = box.space()
        plain = [(layout, overrides) for layout, overrides in space if not overrides]
        rest = [item for item in space if item[1]]
        drawn = random.Random(seed).sample(rest, max(min(launches - len(plain), len(rest)), 0))
        entries = [_entry(layout, overrides, 1) for layout, overrides in plain + drawn]
        for entry in entries:
            _measure_into(entry, measure)
        return entries

    return run


def one_at_a_time(box: Box, measure: Measurer, rules: policy.Policy) -> list[dict[str, Any]]:
    """Per objective: its best layout, then each axis in turn set to its best value on what was kept so far."""
    entries: dict[str, dict[str, Any]] = {}

    def launch(layout: str, overrides: dict[str, Any]) -> dict[str, Any]:
        name = candidate_name(layout, overrides)
        if name not in entries:
            entries[name] = _entry(layout, overrides, 1)
            _measure_into(entries[name], measure)
        return entries[name]

    plain = [launch(layout, {}) for layout in box.layouts if layout not in box.refused]
    for objective in rules.objectives:
        current = max(plain, key=lambda e: e["scores"][objective])
        for axis, values in box.axes:
            for value in values:
                tried = launch(current["layout"], {**current["overrides"], axis: value})
                if decision.gain(tried, current, objective, rules.clear_margin)[0]:
                    current = tried
    return list(entries.values())


@dataclass
class Tally:
    within: list[bool] = field(default_factory=list)
    regret: list[float] = field(default_factory=list)
    false_clear: list[bool] = field(default_factory=list)
    share: list[float] = field(default_factory=list)


def score(box: Box, entries: Sequence[dict[str, Any]], objective: str, clear_margin: float) -> tuple[float, bool] | None:
    """The winner's regret against the exhaustive best, and whether its verdict was a false clear."""
    won = decision.decide(entries, objective, clear_margin)
    if won is None:
        return None
    best = max(box.truth(layout, overrides)[objective] for layout, overrides in box.space())
    mine = box.truth(won.layout, won.overrides)[objective]
    false = False
    if won.clear and won.runner_up is not None:
        rival = next(e for e in entries if e["name"] == won.runner_up)
        false = mine <= box.truth(rival["layout"], rival["overrides"])[objective]
    for axis in won.overrides:  # a knob that truly adds nothing here (0.1% or less): adopted on noise
        without = {k: v for k, v in won.overrides.items() if k != axis}
        if mine <= box.truth(won.layout, without)[objective] * NOTHING:
            false = True
    return 1.0 - mine / best, false


Strategy = Callable[[Box, Measurer, policy.Policy], list[dict[str, Any]]]


def evaluate(
    boxes: int, seed: int, cv: float, strategies: dict[str, tuple[Strategy, policy.Policy]]
) -> dict[str, dict[str, Tally]]:
    """Every strategy on the same `boxes` generated boxes; the tallies per strategy and objective."""
    tallies = {name: {objective: Tally() for objective in OBJECTIVES} for name in strategies}
    for index in range(boxes):
        box = generate(random.Random(f"{seed}-{index}"))
        size = len(box.space())
        for number, (name, (strategy, rules)) in enumerate(strategies.items()):
            measure = Measurer(box, cv, random.Random(f"{seed}-{index}-{number}"))
            entries = strategy(box, measure, rules)
            for objective in OBJECTIVES:
                scored = score(box, entries, objective, rules.clear_margin)
                if scored is None:
                    continue
                tally = tallies[name][objective]
                regret, false = scored
                tally.within.append(regret <= 0.05)
                tally.regret.append(regret)
                tally.false_clear.append(false)
                tally.share.append(len(measure.launched) / size)
    return tallies


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)] if ordered else 0.0


def table(tallies: dict[str, dict[str, Tally]]) -> list[list[str]]:
    rows = [["strategy", "objective", "within 5%", "regret p50", "regret p95", "false clear", "launches"]]
    for name, per in tallies.items():
        for objective, tally in per.items():
            if not tally.regret:
                continue
            rows.append(
                [
                    name,
                    objective,
                    f"{100 * sum(tally.within) / len(tally.within):.1f}%",
                    f"{100 * statistics.median(tally.regret):.1f}%",
                    f"{100 * percentile(tally.regret, 0.95):.1f}%",
                    f"{100 * sum(tally.false_clear) / len(tally.false_clear):.1f}%",
                    f"{100 * statistics.mean(tally.share):.0f}% of the grid",
                ]
            )
    return rows


def default_strategies(clear_margin: float, seed: int) -> dict[str, tuple[Strategy, policy.Policy]]:
    """The strategies compared: the staged search at several --top (the default first), others at their cost."""
    out: dict[str, tuple[Strategy, policy.Policy]] = {}
    for top in (1, 2, 3):
        out[f"staged --top {top}"] = (staged, policy.Policy(top=top, clear_margin=clear_margin))
    out["staged --top 1, combining any gain"] = (staged, policy.Policy(top=1, clear_margin=clear_margin, combine_margin=0.0))
    out["one at a time"] = (one_at_a_time, policy.Policy(clear_margin=clear_margin))
    out["random, 30% of the grid"] = (_random_share(0.3, seed), policy.Policy(clear_margin=clear_margin))
    out["full grid"] = (grid, policy.Policy(clear_margin=clear_margin))
    return out


def _random_share(share: float, seed: int) -> Strategy:
    def run(box: Box, measure: Measurer, rules: policy.Policy) -> list[dict[str, Any]]:
        return random_at(max(int(share * len(box.space())), 1), seed)(box, measure, rules)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=1000, help="generated boxes (default 1000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cv", type=float, default=0.02, help="measurement noise, coefficient of variation (default 0.02)")
    parser.add_argument("--clear-margin", type=float, default=0.05)
    args = parser.parse_args(argv)
    if args.boxes < 1 or not 0 <= args.cv < 1:
        parser.error("--boxes must be at least 1 and --cv in [0, 1)")
    tallies = evaluate(args.boxes, args.seed, args.cv, default_strategies(args.clear_margin, args.seed))
    print(f"{args.boxes} generated boxes, seed {args.seed}, noise CV {args.cv:g}, clear margin {args.clear_margin:g}")
    rows = table(tallies)
    print(tables.text_table(rows[0], rows[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
