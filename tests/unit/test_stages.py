"""The staged search's pure parts (benchmarks/search/stages.py): its candidates, its ranking, stage 3 and
what each knob did, on made-up scores."""

from __future__ import annotations

import pytest

from benchmarks.search import policy, stages
from benchmarks.search import report as search_report
from sglang_layout.candidates import candidate_name, parse_grid
from sglang_layout.errors import DeclarationError

LAYOUTS = {
    "tp8": {"tp": 8},
    "ep8": {"tp": 8, "ep": 8, "args": {"max-running-requests": 128}},
    "ep4": {"tp": 8, "ep": 4, "env": {"NCCL_P2P_DISABLE": "0"}},
}
GRID = [parse_grid("max-running-requests=64,128,256"), parse_grid("env.NCCL_P2P_DISABLE=0,1")]


def measured(layout: str, overrides: dict, stage: int, c1: float, peak: float, **scores) -> dict:
    return {
        "name": candidate_name(layout, overrides),
        "layout": layout,
        "overrides": overrides,
        "label": layout,
        "stage": stage,
        "status": "measured",
        "scores": {"c1": c1, "peak": peak, **scores},
    }


def test_stage_two_varies_one_axis_at_a_time_and_leaves_out_what_a_layout_already_declares():
    bases, singles = stages.first_stages(LAYOUTS, None, GRID)
    assert [c.name for c in bases] == ["tp8", "ep8", "ep4"]
    assert all(len(c.overrides) == 1 for c in singles)
    by_layout = {layout: sorted(str(c.overrides) for c in singles if c.layout == layout) for layout in LAYOUTS}
    assert len(by_layout["tp8"]) == 5  # 3 + 2 values
    # ep8 declares max-running-requests 128, ep4 NCCL_P2P_DISABLE=0: those values would launch the layout again.
    assert "{'max-running-requests': 128}" not in by_layout["ep8"] and len(by_layout["ep8"]) == 4
    assert "{'env.NCCL_P2P_DISABLE': '0'}" not in by_layout["ep4"] and len(by_layout["ep4"]) == 4
    # The sum of the values, where the full grid is their product on every layout.
    assert len(bases) + len(singles) == 16 < stages.full_grid_size(3, GRID) == 18


def test_a_large_grid_is_refused_only_as_a_full_product():
    """Six axes of eight values on three layouts: 786,432 combinations, 147 staged candidates."""
    grid = [parse_grid(f"flag-{i}=" + ",".join(map(str, range(8)))) for i in range(6)]
    bases, singles = stages.first_stages(LAYOUTS, None, grid)
    assert len(bases) + len(singles) == 3 + 3 * 48
    with pytest.raises(DeclarationError, match="given twice"):
        stages.first_stages(LAYOUTS, None, [*grid, grid[0]])


def test_the_strategy_is_staged_when_a_grid_is_given_unless_asked_otherwise():
    assert stages.strategy_for("", GRID) == "staged"
    assert stages.strategy_for("", []) == "grid"
    assert stages.strategy_for("grid", GRID) == "grid"


def test_the_top_layouts_rank_stage_one_on_the_objective():
    entries = [
        measured("tp8", {}, 1, 26.0, 808.0),
        measured("ep8", {}, 1, 65.0, 961.0),
        measured("ep4", {}, 1, 45.0, 1531.0),
        {**measured("pp8", {}, 1, 0, 0), "status": "failed_to_start", "scores": {}},
        measured("ep4", {"max-running-requests": 64}, 2, 50.0, 5000.0),  # not stage 1: not ranked
    ]
    assert stages.top_layouts(entries, "peak", 2) == ["ep4", "ep8"]
    assert stages.top_layouts(entries, "c1", 1) == ["ep8"]
    assert stages.top_layouts(entries, "capacity", 2) == []


def test_stage_three_combines_the_values_that_clearly_gained_and_keeps_the_combination_only_if_it_clearly_wins():
    flag, env = {"max-running-requests": 256}, {"env.NCCL_P2P_DISABLE": "1"}
    entries = [
        measured("ep4", {}, 1, 45.0, 1000.0),
        measured("ep4", {"max-running-requests": 64}, 2, 45.0, 1020.0),  # +2%: within the 5% margin, noise
        measured("ep4", flag, 2, 45.0, 1120.0),  # +12%
        measured("ep4", env, 2, 45.0, 1200.0),  # +20%
        measured("ep8", {}, 1, 65.0, 900.0),
        measured("ep8", flag, 2, 66.0, 930.0),  # +3.3%: not clear, so ep8 has one axis at most
        measured("ep8", env, 2, 65.0, 1000.0),
    ]
    assert stages.best_values(entries, "ep4", "peak", 0.05) == {"env.NCCL_P2P_DISABLE": "1", "max-running-requests": 256}
    ((combined, made_for),) = policy.combinations(LAYOUTS, entries, {"peak": ["ep4", "ep8"]}, 0.05).values()
    assert made_for == ["peak"]
    assert combined.layout == "ep4" and combined.overrides == {**env, **flag}
    assert combined.entry["args"]["max-running-requests"] == 256 and combined.entry["env"]["NCCL_P2P_DISABLE"] == "1"
    both = measured("ep4", {**env, **flag}, 3, 45.0, 1330.0)
    kept, why = stages.keep_combination(entries, both, "peak", 0.05)
    assert kept and why.startswith("kept: +10.8% peak over " + candidate_name("ep4", env))
    barely = measured("ep4", {**env, **flag}, 3, 45.0, 1230.0)
    kept, why = stages.keep_combination(entries, barely, "peak", 0.05)
    assert not kept and "+2.5%" in why and "clear margin is 5%" in why


def test_with_repeats_the_intervals_decide_instead_of_the_margin():
    base = measured("ep4", {}, 1, 45.0, 1000.0, peak_ci=[990.0, 1010.0])
    small_but_apart = measured("ep4", {"max-running-requests": 64}, 2, 45.0, 1030.0, peak_ci=[1025.0, 1035.0])
    large_but_overlapping = measured("ep4", {"env.NCCL_P2P_DISABLE": "1"}, 2, 45.0, 1080.0, peak_ci=[900.0, 1260.0])
    values = stages.best_values([base, small_but_apart, large_but_overlapping], "ep4", "peak", 0.05)
    assert values == {"max-running-requests": 64}


def test_the_effects_table_says_each_knob_against_its_own_layouts_base():
    entries = [
        measured("ep4", {}, 1, 40.0, 1000.0),
        measured("ep4", {"num-continuous-decode-steps": 4}, 2, 50.0, 1120.0),
        measured("ep4", {"env.NCCL_P2P_DISABLE": "1"}, 2, 40.2, 1200.0),
        {**measured("ep8", {"env.NCCL_P2P_DISABLE": "1"}, 2, 1, 1), "status": "skipped", "scores": {}},
        measured("tp8", {"env.NCCL_P2P_DISABLE": "1"}, 2, 30.0, 800.0),  # its base not measured: no row
    ]
    rows = stages.effects(entries, ["c1", "peak"])
    assert [row["values"] for row in rows] == [{"num-continuous-decode-steps": 4}, {"env.NCCL_P2P_DISABLE": "1"}]
    assert rows[0]["objectives"]["c1"]["change"] == 0.25 and rows[0]["objectives"]["peak"]["change"] == 0.12
    assert rows[1]["objectives"]["c1"]["change"] == 0.005 and rows[1]["objectives"]["peak"]["change"] == 0.2
    state = {"candidates": entries, "workload": {"goodput": []}, "slo": []}
    header, table = search_report.effect_rows(state)
    assert header == ["candidate", "layout", "values", "stage", "c1 change", "peak change", "kept"]  # no SLO, no goodput
    assert table[0][2:6] == ["num-continuous-decode-steps=4", "2", "+25.0%", "+12.0%"]
    assert table[1][2:6] == ["env.NCCL_P2P_DISABLE=1", "2", "+0.5%", "+20.0%"]


def test_a_figure_from_too_few_power_samples_never_decides_a_knob_and_says_so():
    """Tokens per joule from one or two dmon samples a level move by more than the margin between runs: a knob
    +40% on them is shown, never adopted, kept or called clear; the plainer server wins the tie."""
    noisy = {"tok_per_joule_unsettled": "2 of 5 power samples a GPU at C=16"}
    entries = [
        measured("ep8", {}, 1, 65.0, 900.0, tok_per_joule=0.5, **noisy),
        measured("ep8", {"max-running-requests": 64}, 2, 65.0, 900.0, tok_per_joule=0.7, **noisy),
        measured("ep8", {"env.NCCL_P2P_DISABLE": "1"}, 2, 65.0, 900.0, tok_per_joule=0.6),  # its base is noisy still
    ]
    assert stages.gain(entries[1]["scores"], entries[0]["scores"], "tok_per_joule", 0.05) == (False, pytest.approx(0.4))
    assert stages.best_values(entries, "ep8", "tok_per_joule", 0.05) == {}
    both = measured("ep8", {"max-running-requests": 64, "env.NCCL_P2P_DISABLE": "1"}, 3, 65.0, 900.0, tok_per_joule=0.9)
    kept, why = stages.keep_combination(entries, both, "tok_per_joule", 0.05)
    assert not kept and "+28.6%" in why and "too few samples to judge (2 of 5 power samples a GPU at C=16)" in why
    assert stages.keep_combination(entries, both, "peak", 0.05)[0] is False  # the other objectives are judged as before
    rows = stages.effects(entries, ["peak", "tok_per_joule"])
    assert rows[0]["objectives"]["tok_per_joule"]["unsettled"] == noisy["tok_per_joule_unsettled"]
    assert rows[0]["objectives"]["peak"]["unsettled"] is None
    state = {"candidates": entries, "workload": {"goodput": [], "gpu_interval": 1}, "slo": []}
    _, table = search_report.effect_rows(state)
    assert table[0][4:7] == ["+0.0%", "+0.0%", "+40.0% (too few samples)"]  # c1, peak, tokens per joule
