"""The strategy evaluator (benchmarks/search/evaluate.py): its scores on boxes whose truth is known."""

from __future__ import annotations

import random

from benchmarks.search import evaluate, policy


def known_box() -> evaluate.Box:
    """L0 is best at peak on its own flags; L1 (best at C=1) with k0=2 beats it at peak by 17%."""
    return evaluate.Box(
        layouts=["L0", "L1"],
        refused=set(),
        axes=[("k0", (1, 2)), ("k1", (1,))],
        base={"L0": {"c1": 40.0, "peak": 1000.0}, "L1": {"c1": 60.0, "peak": 900.0}},
        effects={("k0", 2): evaluate.Effect({"peak": 1.3}, frozenset({"L1"}))},
    )


def test_on_a_box_whose_optimum_is_known_the_staged_search_finds_it_without_noise():
    box = known_box()
    measure = evaluate.Measurer(box, 0.0, random.Random(0))
    entries = evaluate.staged(box, measure, policy.Policy(top=1))
    for objective in ("c1", "peak"):
        assert evaluate.score(box, entries, objective, 0.05) == (0.0, False), objective
    # Found only because C=1's incumbent (L1) was varied too: peak's alone (L0) has no paying value.
    assert len(measure.launched) == 2 + 2 * 3 < len(box.space()) == 2 * 3 * 2


def test_one_incumbent_for_one_objective_would_miss_it():
    box = known_box()
    measure = evaluate.Measurer(box, 0.0, random.Random(0))
    entries = evaluate.staged(box, measure, policy.Policy(top=1, objectives=("peak",)))
    regret, _ = evaluate.score(box, entries, "peak", 0.05)
    assert regret == 1 - 1000.0 / 1170.0


def test_without_noise_no_winner_is_falsely_clear_and_the_full_grid_has_no_regret():
    strategies = {
        "staged": (evaluate.staged, policy.Policy(top=1)),
        "grid": (evaluate.grid, policy.Policy()),
    }
    tallies = evaluate.evaluate(200, 7, 0.0, strategies)
    for name, per in tallies.items():
        for objective, tally in per.items():
            assert len(tally.regret) == 200 and not any(tally.false_clear), (name, objective)
    assert max(tallies["grid"]["peak"].regret) < 0.05  # a plainer winner may tie within the margin, never more
    assert all(share == 1.0 for share in tallies["grid"]["c1"].share)


def test_noise_makes_false_clear_winners_and_the_table_says_so():
    strategies = {"grid": (evaluate.grid, policy.Policy())}
    tallies = evaluate.evaluate(200, 7, 0.05, strategies)
    assert any(tallies["grid"]["peak"].false_clear)
    rows = evaluate.table(tallies)
    assert rows[0][:3] == ["strategy", "objective", "within 5%"] and [row[:2] for row in rows[1:]] == [
        ["grid", "c1"],
        ["grid", "peak"],
    ]


def test_the_same_seed_gives_the_same_boxes():
    first, second = (evaluate.generate(random.Random("1-5")) for _ in range(2))
    assert first == second
