"""--repeats: a level measured several times becomes means with 95% t-intervals."""

from __future__ import annotations

import pytest

from benchmarks import compare, repeats


def level(concurrency, aggregate, per_request=60.0, status="ok"):
    return {
        "concurrency": concurrency,
        "status": status,
        "completed": 8 if status != "failed" else 0,
        "aggregate_tok_s": aggregate,
        "decode_tok_s": {"p50": per_request},
        "ttft_ms": {"p50": 20.0},
        "itl_ms": {"p50": 16.0},
    }


def test_the_interval_is_students_t_over_the_repeats():
    result = repeats.interval([10.0, 12.0, 14.0])
    # mean 12, sd 2, t(0.975, 2) = 4.303: half-width 4.303 x 2 / sqrt(3) = 4.969
    assert result["mean"] == 12.0 and result["n"] == 3
    assert result["ci95"] == pytest.approx([12 - 4.9687, 12 + 4.9687], abs=1e-3)
    assert repeats.interval([5.0])["ci95"] is None


def test_intervals_separate_only_when_they_do_not_overlap():
    assert repeats.separated([1.0, 2.0], [2.5, 3.0]) and repeats.separated([2.5, 3.0], [1.0, 2.0])
    assert not repeats.separated([1.0, 2.6], [2.5, 3.0])
    assert not repeats.separated(None, [1.0, 2.0])


def test_runs_merge_per_level_with_means_and_the_worst_status():
    runs = [
        [level(1, 60.0), level(16, 900.0)],
        [level(1, 62.0), level(16, 0.0, status="failed")],
        [level(1, 64.0), level(16, 960.0)],
    ]
    one, sixteen = repeats.merge_runs(runs)
    assert one["aggregate_tok_s"] == pytest.approx(62.0) and one["status"] == "ok"
    assert one["repeats"]["n"] == 3 and one["repeats"]["aggregate_tok_s"]["values"] == [60.0, 62.0, 64.0]
    assert sixteen["status"] == "partial" and sixteen["repeats"]["usable"] == 2
    assert sixteen["aggregate_tok_s"] == pytest.approx(930.0)  # the failed repeat is not averaged in
    assert runs[0][0]["aggregate_tok_s"] == 60.0  # the inputs are left as they were


def _row(layout, peak, ci):
    return {"layout": layout, "peak_tok_s": peak, "peak_ci": ci, "c1_tok_s": None, "c1_ci": None}


def test_compare_names_a_winner_only_when_the_intervals_separate():
    clear = compare.verdict([_row("ep4", 1531.0, [1500.0, 1560.0]), _row("ep8", 961.0, [950.0, 970.0])], "peak", "peak")
    assert clear.endswith("clear (95% intervals apart)") and "best peak: ep4" in clear
    overlap = compare.verdict([_row("a", 1000.0, [900.0, 1100.0]), _row("b", 950.0, [940.0, 960.0])], "peak", "peak")
    assert overlap.endswith("no clear winner (95% intervals overlap)")
    single = compare.verdict([_row("a", 1000.0, None), _row("b", 950.0, None)], "peak", "peak")
    assert "single runs, no intervals" in single
    assert compare.verdict([_row("a", 1000.0, None)], "peak", "peak") == ""
