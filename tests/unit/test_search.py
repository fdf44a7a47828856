"""The layout search's pure parts: candidates, stopping rules, objectives, the manifest and its report."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks import slo
from benchmarks.search import decision, manifest, objectives
from benchmarks.search import report as search_report
from sglang_layout.candidates import candidate_name, declaration_hash, expand, parse_grid
from sglang_layout.errors import DeclarationError
from sglang_layout.schema import parse_layouts

LAYOUTS = {
    "tp8": {"description": "tensor parallel", "tp": 8},
    "ep8": {"tp": 8, "ep": 8, "args": {"max-running-requests": 128}},
}


def level(concurrency, aggregate, *, per_request=10.0, tpot_p99=20.0, status="ok", completed=8):
    return {
        "concurrency": concurrency,
        "aggregate_tok_s": aggregate,
        "status": status,
        "completed": completed,
        "decode_tok_s": {"p50": per_request},
        "tpot_ms": {"p99": tpot_p99},
        "ttft_ms": {"p99": 100.0},
        "itl_ms": {"p99": tpot_p99},
        "e2e_ms": {"p99": 1000.0},
    }


# --- candidates ---------------------------------------------------------------


def test_grid_values_read_as_the_declaration_would_hold_them():
    assert parse_grid("max-running-requests=64,256") == ("max-running-requests", (64, 256))
    assert parse_grid("--mem-fraction-static=0.8,0.88") == ("mem-fraction-static", (0.8, 0.88))
    assert parse_grid("enable-dp-attention=true,false") == ("enable-dp-attention", (True, None))
    assert parse_grid("moe-a2a-backend=none,deepep") == ("moe-a2a-backend", (None, "deepep"))


@pytest.mark.parametrize("spec", ["max-running-requests", "=1,2", "x=", "x=1,,2", "x=1,1", "bad name=1", "x y=1"])
def test_bad_grid_specs_are_refused_with_an_example(spec):
    with pytest.raises(DeclarationError, match="--grid"):
        parse_grid(spec)


def test_every_layout_is_crossed_with_every_grid_point_and_keeps_its_own_args():
    grid = [parse_grid("max-running-requests=64,256"), parse_grid("num-continuous-decode-steps=1,8")]
    candidates = expand(LAYOUTS, None, grid)
    assert len(candidates) == 8
    assert [c.layout for c in candidates] == ["tp8"] * 4 + ["ep8"] * 4
    ep8 = [c for c in candidates if c.layout == "ep8"]
    assert {c.entry["args"]["max-running-requests"] for c in ep8} == {64, 256}  # the grid overrides the layout's own
    assert all(c.entry["ep"] == 8 and c.entry["tp"] == 8 for c in ep8)
    assert LAYOUTS["ep8"]["args"] == {"max-running-requests": 128}  # the declaration is not touched
    assert len({c.name for c in candidates}) == 8
    assert all(c.name.startswith(f"{c.layout}-g") for c in candidates)
    assert "search: max-running-requests=64" in candidates[0].entry["description"]


def test_without_a_grid_the_candidates_are_the_declared_layouts_by_name():
    candidates = expand(LAYOUTS, ["ep8"], [])
    assert [(c.name, c.label, c.entry) for c in candidates] == [("ep8", "ep8", LAYOUTS["ep8"])]


def test_candidate_names_are_stable_and_valid_layout_names():
    first = candidate_name("ep8", {"max-running-requests": 64, "num-continuous-decode-steps": 8})
    again = candidate_name("ep8", {"num-continuous-decode-steps": 8, "max-running-requests": 64})
    assert first == again != candidate_name("ep8", {"max-running-requests": 256})
    layouts = parse_layouts({c.name: c.entry for c in expand(LAYOUTS, None, [parse_grid("max-running-requests=64,256")])})
    assert len(layouts) == 4


def test_unknown_layouts_and_repeated_flags_are_refused():
    with pytest.raises(DeclarationError, match=re.escape("'ep4': not declared. Fix: choose from sglang_layouts: tp8, ep8")):
        expand(LAYOUTS, ["ep4"], [])
    with pytest.raises(DeclarationError, match="given twice"):
        expand(LAYOUTS, None, [parse_grid("x=1"), parse_grid("x=2")])


def test_a_grid_flag_that_smuggles_a_reserved_flag_is_refused_by_the_declaration_rules():
    candidates = expand(LAYOUTS, ["ep8"], [parse_grid("port=1234")])
    with pytest.raises(DeclarationError, match="port"):
        parse_layouts({c.name: c.entry for c in candidates})


def test_an_environment_axis_goes_into_the_candidates_env_as_text_beside_the_flags():
    assert parse_grid("env.NCCL_P2P_DISABLE=0,1") == ("env.NCCL_P2P_DISABLE", ("0", "1"))
    with pytest.raises(DeclarationError, match=re.escape("env.VARIABLE=V1,V2")):
        parse_grid("env.1BAD=0")
    layouts = {**LAYOUTS, "ep8": {**LAYOUTS["ep8"], "env": {"NCCL_ALGO": "Ring"}}}
    grid = [parse_grid("env.NCCL_P2P_DISABLE=0,1"), parse_grid("max-running-requests=64")]
    candidates = expand(layouts, ["ep8"], grid)
    assert [c.entry["env"] for c in candidates] == [
        {"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "0"},
        {"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"},
    ]
    assert all(c.entry["args"] == {"max-running-requests": 64} for c in candidates)
    assert candidates[1].label == "ep8 + env.NCCL_P2P_DISABLE=1, max-running-requests=64"
    assert len({c.name for c in candidates}) == 2
    parsed = parse_layouts({c.name: c.entry for c in candidates}, common_env={"OMP_NUM_THREADS": "8"})
    assert parsed[candidates[1].name].env == {"OMP_NUM_THREADS": "8", "NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"}


@pytest.mark.parametrize(
    ("variable", "said"),
    [
        ("CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
        ("LD_PRELOAD", "dynamic loader"),
        ("PYTHONPATH", "load or redirect code"),
        ("NCCL_NET_PLUGIN", "plugin"),
        ("CUDA_INJECTION64_PATH", "search path"),
    ],
)
def test_an_environment_axis_is_held_to_the_declarations_rules(variable, said):
    candidates = expand(LAYOUTS, ["ep8"], [parse_grid(f"env.{variable}=x")])
    with pytest.raises(DeclarationError, match=said):
        parse_layouts({c.name: c.entry for c in candidates})


def test_the_declaration_hash_follows_what_decides_the_server():
    shared = {"sglang_common_args": {"context-length": 32768}, "sglang_version": "0.5.23"}
    base = declaration_hash(LAYOUTS["ep8"], shared)
    assert base == declaration_hash(json.loads(json.dumps(LAYOUTS["ep8"])), dict(shared))
    assert base != declaration_hash(LAYOUTS["ep8"], {**shared, "sglang_version": "0.5.24"})
    assert base != declaration_hash({**LAYOUTS["ep8"], "ep": 4}, shared)


# --- stopping and objectives ------------------------------------------------------


def test_levels_stop_at_the_knee():
    assert slo.stop_reason([level(1, 60), level(16, 900)], knee=0.05, slo=[]) == ""
    reason = slo.stop_reason([level(1, 60), level(16, 900), level(64, 930)], knee=0.05, slo=[])
    assert reason == "knee: C=64 gained +3.3% over C=16"
    assert slo.stop_reason([level(16, 900), level(64, 930)], knee=0.0, slo=[]) == ""


def test_levels_stop_when_the_slo_breaks_or_a_level_fails():
    bounds = [slo.parse_slo("tpot_p99=50")]
    assert slo.stop_reason([level(16, 900, tpot_p99=49.0)], knee=0.05, slo=bounds) == ""
    assert "broke the SLO (tpot_p99)" in slo.stop_reason([level(64, 2000, tpot_p99=51.0)], knee=0.05, slo=bounds)
    assert slo.stop_reason([level(64, 0, status="failed", completed=0)], knee=0.05, slo=[]) == "C=64 failed"


@pytest.mark.parametrize("text", ["tpot=50", "tpot_p99", "latency_p99=5", "tpot_p98=5", "tpot_p99=-1"])
def test_bad_slo_bounds_are_refused(text):
    with pytest.raises(ValueError, match="METRIC_STAT=MS"):
        slo.parse_slo(text)


def test_the_slo_capacity_is_narrowed_by_bisection_between_the_levels_that_bracket_it():
    bounds = [slo.parse_slo("tpot_p99=50")]

    def measured(*pairs):  # (C, TPOT p99)
        return [level(c, 10.0 * c, tpot_p99=t) for c, t in pairs]

    assert slo.next_probe(measured((1, 10), (16, 40), (64, 80)), bounds, resolution=0.1) == 40
    assert slo.next_probe(measured((1, 10), (16, 40), (40, 45), (64, 80)), bounds, resolution=0.1) == 52
    assert slo.bracket(measured((1, 10), (16, 40), (40, 45), (52, 60), (64, 80)), bounds) == (40, 52)
    assert slo.next_probe(measured((16, 40), (40, 45), (44, 60), (52, 60)), bounds, resolution=0.1) is None  # 4 <= 10% of 40
    assert slo.next_probe(measured((1, 10), (16, 40)), bounds, resolution=0.1) is None  # never broke
    assert slo.next_probe(measured((1, 60), (16, 70)), bounds, resolution=0.1) is None  # never held
    assert slo.next_probe(measured((1, 10), (2, 60)), bounds, resolution=0.1) is None  # nothing between 1 and 2
    assert slo.next_probe(measured((1, 10), (64, 80)), [], resolution=0.1) is None


def test_scores_per_objective():
    bounds = [slo.parse_slo("tpot_p99=50")]
    levels = [level(1, 65, per_request=65.0, tpot_p99=16), level(16, 900, tpot_p99=40), level(64, 960, tpot_p99=70)]
    assert objectives.scores(levels, bounds) == {
        "c1": 65.0,
        "c1_c": 1,
        "peak": 960,
        "peak_c": 64,
        "capacity": 900,
        "capacity_c": 16,
        "capacity_bracket": [16, 64],
        "goodput": None,
        "goodput_c": None,
        "c1_ci": None,
        "peak_ci": None,
        "tok_per_joule": None,
        "tok_per_joule_c": None,
    }
    levels[1]["goodput"] = {"good_tok_s": 850.0}
    levels[2]["goodput"] = {"good_tok_s": 300.0}  # more load, fewer requests within the bounds
    assert objectives.scores(levels, bounds)["goodput"] == 850.0 and objectives.scores(levels, bounds)["goodput_c"] == 16
    assert objectives.scores(levels[1:], [])["c1"] is None


def test_tokens_per_joule_is_the_best_levels_aggregate_over_the_gpus_summed_power():
    def gpus(*watts: float) -> dict:  # each GPU's median power over the level, as gpu_telemetry.summarize gives
        return {"per_gpu": {str(i): {"sm": {"mean": 50.0}, "pwr": {"mean": w, "p50": w}} for i, w in enumerate(watts)}}

    levels = [level(1, 65, per_request=65.0), level(16, 900), level(64, 960)]
    levels[0]["gpus"], levels[1]["gpus"], levels[2]["gpus"] = gpus(100.0, 100.0), gpus(300.0, 300.0), gpus(600.0, 600.0)
    scores = objectives.scores(levels, [])
    assert (scores["tok_per_joule"], scores["tok_per_joule_c"]) == (1.5, 16)  # 900 / 600 W beats 960 / 1200 W
    assert objectives.scores([*levels[:1], level(16, 900)], [])["tok_per_joule"] == 0.325  # no telemetry at C=16
    asked = objectives.asked({"slo": [], "workload": {"gpu_interval": 1}})
    assert asked == {"capacity": False, "goodput": False, "tok_per_joule": True}


def test_tokens_per_joule_from_too_few_power_samples_are_shown_but_never_win_clear():
    """A level of a few seconds gives dmon one or two samples a GPU (bin/rehearse's): the figure stands, and
    says it is too noisy to judge; five samples or more, or a summary without a count, are judged as usual."""

    def sampled(aggregate: float, watts: float, samples: int | None) -> dict:
        at16 = level(16, aggregate)
        at16["gpus"] = {"per_gpu": {"0": {"sm": {"mean": 50.0}, "pwr": {"mean": watts, "p50": watts}}}}
        if samples is not None:
            at16["gpus"]["samples"] = samples
        return at16

    two, five, uncounted = (objectives.scores([sampled(900, 600.0, n)], []) for n in (2, 5, None))
    assert two["tok_per_joule"] == 1.5 and two["tok_per_joule_unsettled"] == "2 of 5 power samples a GPU at C=16"
    assert "tok_per_joule_unsettled" not in five and "tok_per_joule_unsettled" not in uncounted
    flagged = objectives.scores([sampled(1200, 600.0, 2)], [])
    entries = [
        entry("ep8", **two),
        entry("ep8-k", "ep8", {"steps": 4}, **flagged),
        entry("tp8", **objectives.scores([sampled(600, 600.0, 9)], [])),
    ]
    best = decision.decide(entries, "tok_per_joule", clear_margin=0.05)
    assert (best.name, best.runner_up, best.clear) == ("ep8", "tp8", False)  # +33% with the knob: not adopted
    assert best.knobs == "knobs: none beat plain ep8 beyond the noise"
    assert "+50.0% over tp8 (not clear: too few samples (2 of 5 power samples a GPU at C=16))" in best.sentence()
    settled = decision.decide(
        [entry("ep8", **five), entry("tp8", **objectives.scores([sampled(600, 600.0, 9)], []))], "tok_per_joule", 0.05
    )
    assert settled.clear and "(clear)" in settled.sentence()


def test_an_objective_added_to_the_table_is_scored_asked_and_decided_without_other_edits(monkeypatch):
    """docs/extending.md: an objective is a row of objectives.OBJECTIVES."""
    c16 = objectives.Objective(
        "tok/s per request at C=16",
        lambda levels, slo: next((level for level in levels if level["concurrency"] == 16), None),
        lambda level: level["decode_tok_s"]["p50"],
        asked=lambda state: bool(state.get("per_user_at_16")),
    )
    monkeypatch.setitem(objectives.OBJECTIVES, "c16", c16)
    ep8 = objectives.scores([level(1, 65, per_request=65.0), level(16, 900, per_request=56.0)], [])
    tp8 = objectives.scores([level(1, 26, per_request=26.0), level(16, 400, per_request=25.0)], [])
    assert (ep8["c16"], ep8["c16_c"]) == (56.0, 16)
    assert objectives.asked({"per_user_at_16": True})["c16"] and not objectives.asked({})["c16"]
    won = decision.decide([entry("ep8", **ep8), entry("tp8", **tp8)], "c16", 0.03)
    assert won.name == "ep8" and won.clear and "tok/s per request at C=16 56.0" in won.sentence()


def entry(name: str, layout: str = "", overrides: dict | None = None, **scores: object) -> dict:
    """A measured manifest entry (a layout's own when no overrides)."""
    return {"name": name, "layout": layout or name, "overrides": overrides or {}, "status": "measured", "scores": scores}


def test_the_layout_is_clear_only_beyond_the_margin_over_every_other_layout():
    entries = [entry("ep8", peak=961.0), entry("ep4", peak=1531.0), entry("tp8", peak=808.0), entry("bad", peak=None)]
    best = decision.decide(entries, "peak", clear_margin=0.05)
    assert (best.name, best.runner_up, best.clear) == ("ep4", "ep8", True)
    assert best.margin == pytest.approx(1531 / 961 - 1) and best.knobs == "knobs: none tried on ep4"
    close = decision.decide([entry("a", c1=65.0), entry("b", c1=64.0)], "c1", clear_margin=0.05)
    assert (close.name, close.clear) == ("a", False) and "not clear" in close.sentence()
    assert decision.decide([entry("a", c1=None)], "c1", clear_margin=0.05) is None
    alone = decision.decide([entry("a", c1=65.0)], "c1", clear_margin=0.05)
    assert alone.runner_up is None and alone.clear and "the only layout measured" in alone.sentence()


def test_a_knob_within_the_noise_loses_to_its_plain_layout_which_is_clear_against_the_other_layouts():
    """The rehearsal's case: TP8 clearly best at peak, NCCL_P2P_DISABLE=0 on it +0.5% (noise)."""
    nccl = {"env.NCCL_P2P_DISABLE": "0"}
    entries = [entry("tp8", peak=1703.8), entry("tp8-g32a030", "tp8", nccl, peak=1713.0), entry("ep4", peak=1226.3)]
    best = decision.decide(entries, "peak", clear_margin=0.05)
    assert (best.name, best.overrides, best.runner_up, best.clear) == ("tp8", {}, "ep4", True)
    assert best.knobs == "knobs: none beat plain tp8 beyond the noise"
    assert [name for name, _ in best.tied] == ["tp8-g32a030"]
    said = best.sentence()
    assert "+38.9% over ep4 (clear); knobs: none beat plain tp8 beyond the noise" in said
    assert "tied within the noise: tp8-g32a030 +0.5%" in said


def test_a_knob_that_clearly_helps_is_kept_and_said_against_its_plain_layout():
    entries = [entry("tp8", peak=1000.0), entry("tp8-gk", "tp8", {"steps": 4}, peak=1100.0), entry("ep4", peak=900.0)]
    best = decision.decide(entries, "peak", clear_margin=0.05)
    assert (best.name, best.overrides, best.runner_up) == ("tp8-gk", {"steps": 4}, "ep4")
    assert best.knobs == "knobs: steps=4, +10.0% over plain tp8 (clear)" and best.clear


def test_a_knob_set_counts_only_where_it_clearly_beat_its_plain_layout():
    # A alone +4% (noise), A and B together +8%: the pair wins, though A alone has fewer knobs and ties it.
    entries = [
        entry("tp8", peak=100.0),
        entry("tp8-ga", "tp8", {"a": 1}, peak=104.0),
        entry("tp8-gab", "tp8", {"a": 1, "b": 2}, peak=108.0),
    ]
    best = decision.decide(entries, "peak", clear_margin=0.05)
    assert best.name == "tp8-gab" and "+8.0% over plain tp8 (clear)" in best.knobs


def test_across_layouts_the_plainer_server_wins_a_tie():
    # TP8 with a knob clearly beats plain TP8, but plain EP8 is within the noise of it: EP8, not clear.
    entries = [entry("tp8", peak=1600.0), entry("tp8-gk", "tp8", {"k": 1}, peak=1780.0), entry("ep8", peak=1750.0)]
    best = decision.decide(entries, "peak", clear_margin=0.05)
    assert (best.name, best.runner_up, best.clear) == ("ep8", "tp8-gk", False)
    assert best.margin == pytest.approx(1750 / 1780 - 1)


def test_a_combination_not_kept_is_no_winner():
    entries = [entry("ep4", peak=100.0), {**entry("ep4-gx", "ep4", {"a": 1, "b": 1}, peak=130.0), "kept": False}]
    assert decision.decide(entries, "peak", clear_margin=0.05).name == "ep4"


def test_with_repeats_a_decision_is_clear_only_when_the_intervals_separate():
    apart = [entry("a", peak=1000.0, peak_ci=[980.0, 1020.0]), entry("b", peak=900.0, peak_ci=[890.0, 910.0])]
    assert decision.decide(apart, "peak", clear_margin=0.5).clear  # far below the margin, but the intervals part
    close = [entry("a", peak=1000.0, peak_ci=[900.0, 1100.0]), entry("b", peak=900.0, peak_ci=[890.0, 910.0])]
    assert not decision.decide(close, "peak", clear_margin=0.05).clear  # 11% ahead, yet the intervals overlap
    knob = [
        entry("a", peak=1000.0, peak_ci=[990.0, 1010.0]),
        entry("a-gk", "a", {"k": 1}, peak=1030.0, peak_ci=[1020.0, 1040.0]),
    ]
    assert decision.decide(knob, "peak", clear_margin=0.05).name == "a-gk"  # +3%, yet the intervals part


def test_the_pareto_front_keeps_only_undominated_points():
    points = [("a", 100, 60), ("b", 900, 50), ("c", 800, 40), ("d", 1500, 20), ("e", 1400, 10)]
    assert [p[0] for p in objectives.pareto_front(points)] == ["a", "b", "d"]


# --- the manifest ---------------------------------------------------------------


def test_the_search_id_depends_on_host_candidates_and_workload():
    base = manifest.search_id("box", ["h1", "h2"], {"levels": [1, 16]})
    assert base == manifest.search_id("box", ["h1", "h2"], {"levels": [1, 16]})
    assert base != manifest.search_id("box", ["h1"], {"levels": [1, 16]})
    assert base != manifest.search_id("box", ["h1", "h2"], {"levels": [1, 64]})
    assert base != manifest.search_id("other", ["h1", "h2"], {"levels": [1, 16]})


def test_the_manifest_is_replaced_whole_and_keeps_no_secret(tmp_path):
    path = manifest.path_for(tmp_path, "box/../x", "abc")
    assert path.parent == tmp_path / "box_.._x" / "searches"
    state = {"kind": manifest.KIND, "id": "abc", "candidates": [], "server": {"api_key": "s3cret"}}
    manifest.save(state, path)
    manifest.save({**state, "candidates": [{"name": "ep8"}]}, path)
    assert manifest.load(path)["candidates"] == [{"name": "ep8"}]
    assert "s3cret" not in path.read_text()
    assert [p.name for p in path.parent.iterdir()] == ["abc.json"]  # no partial file left


def test_a_file_that_is_not_a_manifest_is_named_not_overwritten(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape("m.json: not a readable search manifest")):
        manifest.load(path)
    path.write_text(json.dumps({"kind": "sglang-benchmark-run"}))
    with pytest.raises(ValueError, match="not a search manifest"):
        manifest.load(path)
    assert manifest.load(tmp_path / "none.json") is None


def test_resume_keeps_finished_candidates_of_the_same_declaration_only(tmp_path):
    record = tmp_path / "run.json"
    record.write_text("{}")
    previous = {
        "candidates": [
            {"name": "ep8", "hash": "h1", "status": "measured", "record": str(record)},
            {"name": "tp8", "hash": "h2", "status": "running"},
            {"name": "pp8", "hash": "h3", "status": "failed_to_start", "error": "OOM"},
            {"name": "ep4", "hash": "h4", "status": "measured", "record": str(tmp_path / "gone.json")},
        ]
    }
    assert manifest.kept(previous, "ep8", "h1")["status"] == "measured"
    assert manifest.kept(previous, "ep8", "changed") is None  # the declaration changed: measure again
    assert manifest.kept(previous, "tp8", "h2") is None  # was in progress when the controller died
    assert manifest.kept(previous, "pp8", "h3")["error"] == "OOM"
    assert manifest.kept(previous, "ep4", "h4") is None  # its record is gone
    assert manifest.kept(None, "ep8", "h1") is None


# --- the report -------------------------------------------------------------------


def _state():
    candidates = [
        {
            "name": "ep8",
            "label": "ep8",
            "status": "measured",
            "load_s": 2.0,
            "levels_run": [1, 16],
            "overhead_s": 4.0,
            "scores": {"c1": 65.0, "peak": 961.0, "peak_c": 16},
            "curve": [[1, 65.0, 65.0], [16, 961.0, 60.0]],
        },
        {"name": "tp2ep4", "label": "tp2ep4", "status": "refused", "reasons": ["ep 4 does not divide tp 2"]},
    ]
    workload = {"levels": [1, 16, 64], "endpoint": "chat", "input_tokens": 128, "output_tokens": 64}
    winners = {"peak": {"name": "ep8", "sentence": "peak: ep8 (...)"}}
    return {
        "id": "abc",
        "host": "box",
        "objective": "peak",
        "knee": 0.05,
        "slo": [],
        "candidates": candidates,
        "workload": workload,
        "winners": winners,
        "wall_s": 30.0,
        "serving_at_end": "ep8",
    }


def test_the_report_names_winners_refusals_and_what_was_saved(tmp_path):
    entries = {"ep8": {"tp": 8, "ep": 8}}
    text = search_report.text(_state(), entries)
    assert "refused: ep 4 does not divide tp 2" in text and "winner peak: ep8" in text
    assert "1 launched, 1 refused by preflight" in text and "2 of 3 levels measured" in text
    assert "4.0 s per candidate" in text
    assert "sglang_layouts:\n  ep8:\n    tp: 8\n    ep: 8" in text
    outputs = search_report.write(_state(), tmp_path / "abc.json", entries)
    assert outputs["plot"].read_bytes()[:4] == b"\x89PNG"
    assert "![curves](abc.png)" in outputs["markdown"].read_text()


def test_request_rates_are_bisected_too():
    bounds = [slo.parse_slo("ttft_p99=200")]

    def at_rate(rate, ttft_p99):
        arrival = {"target_rate": rate, "burstiness": 1.0, "max_concurrency": 0}
        return {**level(None, 10.0 * rate), "arrival": arrival, "ttft_ms": {"p99": ttft_p99}}

    levels = [at_rate(1.0, 50), at_rate(4.0, 120), at_rate(16.0, 900)]
    assert slo.bracket(levels, bounds) == (4.0, 16.0)
    assert slo.next_probe(levels, bounds, resolution=0.1) == 10.0
    assert slo.next_probe([*levels, at_rate(4.2, 150)], bounds, resolution=0.1) == 10.1
    assert slo.next_probe([at_rate(4.0, 120), at_rate(4.3, 900)], bounds, resolution=0.1) is None  # within 10% of 4
    assert "R=16/s broke the SLO (ttft_p99)" in slo.stop_reason(levels, knee=0.0, slo=bounds)


def test_a_candidate_sglang_refuses_is_refused_with_its_words_and_what_it_rewrites_is_recorded():
    from benchmarks.search.runner import _entry
    from sglang_layout.candidates import Candidate

    report = {
        "sglang_version": "0.5.23",
        "candidates": [
            {
                "name": "dcpq",
                "accepted": False,
                "refusal": {"type": "ValueError", "message": "--dcp-replicate-q-proj requires --dcp-size > 1.", "where": ""},
                "resolved": [],
            },
            {
                "name": "ep4",
                "accepted": True,
                "refusal": None,
                "resolved": [{"field": "ep_size", "parsed": 4, "resolved": 8, "by": "_a2a_ep_size", "declared": True}],
            },
        ],
    }
    refused = _entry(Candidate("dcpq", "dcpq"), "h1", {"ok": True, "findings": []}, report)
    assert refused["status"] == "refused"
    assert refused["reasons"] == [
        "SGLang 0.5.23's own check refuses it: ValueError: --dcp-replicate-q-proj requires --dcp-size > 1."
    ]
    kept = _entry(Candidate("ep4", "ep4"), "h2", {"ok": True, "findings": []}, report)
    assert kept["status"] == "pending" and kept["sglang"]["resolved"] == ["rewrites ep_size: 4 -> 8 (_a2a_ep_size)"]
    plain = [{**kept, "name": f"tp8-{n}", "sglang": {**kept["sglang"], "resolved": []}} for n in range(10)]
    lines = search_report.sglang_lines({"candidates": [refused, kept, *plain]})
    assert lines[0].startswith("dcpq: SGLang 0.5.23 refuses (ValueError") and "rule for review" in lines[0]
    assert lines[1:3] == ["ep4: SGLang 0.5.23 accepts", "  rewrites ep_size: 4 -> 8 (_a2a_ep_size)"]
    # The many taken as written, where ours agree, in one line.
    assert lines[3:] == ["taken as written, as ours judged them: " + ", ".join(f"tp8-{n}" for n in range(8)) + " and 2 more"]


def test_what_ours_refuse_at_load_is_no_disagreement_and_a_real_one_is_one_line_per_layout():
    """tp2ep4 refused by our memory/MoE rules, taken by SGLang's argument checks (which load no weights): one quiet
    line however many grid points; a real disagreement over four grid points of one layout: one line."""
    from benchmarks.search.runner import _entry
    from sglang_layout.candidates import Candidate

    names = [f"tp2ep4-g{n}" for n in range(4)] + [f"dcpq-g{n}" for n in range(4)]
    report = {"sglang_version": "0.5.23", "candidates": [{"name": n, "accepted": True, "resolved": []} for n in names]}
    at_load = {"ok": False, "findings": [{"severity": "error", "rule": "moe-tp-width"}, {"severity": "error", "rule": "memory"}]}
    missed = {"ok": False, "findings": [{"severity": "error", "rule": "moe-dense-tp"}]}
    entries = [_entry(Candidate(n, "tp2ep4"), "h", at_load, report) for n in names[:4]]
    entries += [_entry(Candidate(n, "dcpq"), "h", missed, report) for n in names[4:]]
    assert all(e["status"] == "refused" for e in entries)
    assert [e["sglang"]["agrees_with_ours"] for e in entries] == [True] * 4 + [False] * 4
    assert search_report.sglang_lines({"candidates": entries}) == [
        "dcpq (4 candidates: dcpq-g0, dcpq-g1, dcpq-g2, dcpq-g3): SGLang 0.5.23 accepts; our rules judged it otherwise"
        " (rule for review)",
        "refused by our rules for a failure at load, which SGLang's argument checks do not reach: tp2ep4 (4)",
    ]
