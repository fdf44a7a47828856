"""The staged strategy as one pure policy (benchmarks/search/policy.py): each stage's choice on given states."""

from __future__ import annotations

import json

from benchmarks.search import policy
from sglang_layout.candidates import candidate_name

LAYOUTS = {"tp8": {"tp": 8}, "ep8": {"tp": 8, "ep": 8}, "ep4": {"tp": 8, "ep": 4}}
AXES = {"a": (1, 2), "b": (1,)}
RULES = policy.Policy(top=1, clear_margin=0.05, objectives=("c1", "peak"))


def entry(layout: str, overrides: dict | None = None, stage: int = 1, status: str = "pending", **scores: float) -> dict:
    overrides = overrides or {}
    return {
        "name": candidate_name(layout, overrides),
        "layout": layout,
        "overrides": overrides,
        "stage": stage,
        "status": status,
        "scores": scores,
        "label": layout,
    }


def stage_two(status: str = "pending", **measured: dict) -> list[dict]:
    """Every layout's single values; `measured` gives scores per candidate name."""
    out = []
    for layout in LAYOUTS:
        for axis, values in AXES.items():
            for value in values:
                e = entry(layout, {axis: value}, stage=2, status=status)
                if e["name"] in measured:
                    e.update(status="measured", scores=measured[e["name"]])
                out.append(e)
    return out


MEASURED_1 = [
    entry("tp8", status="measured", c1=40.0, peak=800.0),
    entry("ep8", status="measured", c1=65.0, peak=960.0),
    entry("ep4", status="measured", c1=45.0, peak=1500.0),
]


def test_stage_one_comes_first():
    entries = [entry(layout) for layout in LAYOUTS] + stage_two()
    step = policy.next_step(LAYOUTS, entries, RULES)
    assert (step.stage, step.launch, step.new) == (1, ["tp8", "ep8", "ep4"], [])


def test_stage_two_varies_the_best_layout_of_each_objective_and_skips_the_rest_saying_why():
    step = policy.next_step(LAYOUTS, MEASURED_1 + stage_two(), RULES)
    assert step.stage == 2 and step.explored == {"c1": ["ep8"], "peak": ["ep4"]}
    assert {name.split("-g")[0] for name in step.launch} == {"ep8", "ep4"} and len(step.launch) == 6
    assert len(step.skip) == 3 and all("c1: ep8; peak: ep4" in why for why in step.skip.values())


def test_a_layout_best_for_both_objectives_is_varied_once():
    measured = [dict(e) for e in MEASURED_1]
    measured[2]["scores"] = {"c1": 70.0, "peak": 1500.0}  # EP4 best for both
    step = policy.next_step(LAYOUTS, measured + stage_two(), RULES)
    assert step.explored == {"c1": ["ep4"], "peak": ["ep4"]} and len(step.launch) == 3 == len(set(step.launch))


def test_a_layout_another_objective_varies_is_taken_where_it_ties_and_not_where_it_is_clearly_behind():
    """EP8 and EP4 within the clear margin at peak (by noise, as bin/rehearse's ep8 and ep8-tuned on one clock
    were on 7 Dec 2026): EP8, already C=1's incumbent, is varied once for both. Beyond the margin, EP4."""
    tied = [dict(e) for e in MEASURED_1]
    tied[2]["scores"] = {"c1": 45.0, "peak": 990.0}  # EP4 +3% over EP8 at peak: within 5%
    step = policy.next_step(LAYOUTS, tied + stage_two(), RULES)
    assert step.explored == {"c1": ["ep8"], "peak": ["ep8"]} and len(step.launch) == 3
    assert policy.incumbents(MEASURED_1, RULES) == {"c1": ["ep8"], "peak": ["ep4"]}  # EP4 +56% at peak
    two = policy.Policy(top=2, clear_margin=0.05)
    assert policy.incumbents(tied, two) == {"c1": ["ep8", "ep4"], "peak": ["ep4", "ep8"]}  # both varied anyway


def test_stage_three_combines_per_objective_what_clearly_helped_it():
    a2, b1 = candidate_name("ep4", {"a": 2}), candidate_name("ep4", {"b": 1})
    c1_a, c1_b = candidate_name("ep8", {"a": 2}), candidate_name("ep8", {"b": 1})
    scores = {
        a2: {"c1": 45.0, "peak": 1700.0},  # peak +13%
        b1: {"c1": 45.0, "peak": 1800.0},  # peak +20%
        c1_a: {"c1": 75.0, "peak": 960.0},  # C=1 +15% on EP8
        c1_b: {"c1": 66.0, "peak": 960.0},  # noise
    }
    entries = MEASURED_1 + [e for e in stage_two(**scores) if e["layout"] in ("ep8", "ep4")]
    entries = [e if e["status"] == "measured" else {**e, "status": "measured", "scores": e["scores"] or {}} for e in entries]
    step = policy.next_step(LAYOUTS, [*entries, entry("tp8", {"a": 1}, stage=2, status="skipped")], RULES)
    # EP4 gained on two axes for peak: combined; EP8 gained on one for C=1: stage 2 measured it already.
    assert step.stage == 3 and [c.name for c in step.new] == [candidate_name("ep4", {"a": 2, "b": 1})]
    assert step.explored == {"c1": [], "peak": ["ep4"]}
    assert policy.built_for(LAYOUTS, entries, step.new[0].name, RULES) == ["peak"]
    combined = {**entry("ep4", {"a": 2, "b": 1}, stage=3, status="measured", c1=45.0, peak=2100.0)}
    done = policy.next_step(LAYOUTS, [*entries, combined], RULES)
    assert done.stage == 0
    kept, why = policy.keep([*entries, combined], combined, ["peak"], 0.05)
    assert kept and why.startswith("kept: peak +16.7% peak over")


def test_the_same_state_gives_the_same_step_also_after_a_round_trip_through_the_manifest():
    entries = MEASURED_1 + stage_two()
    again = json.loads(json.dumps(entries))
    assert policy.next_step(LAYOUTS, entries, RULES) == policy.next_step(LAYOUTS, again, RULES)


def test_an_objective_stage_one_gave_no_figure_for_has_no_incumbent():
    rules = policy.Policy(top=1, objectives=("c1", "peak", "capacity"))  # capacity: no SLO, no figure
    assert policy.incumbents(MEASURED_1, rules) == {"c1": ["ep8"], "peak": ["ep4"]}
