"""The staged search's flow in the runner, in milliseconds: the box's edges (the inventory, preflight, the
deploy and the measurement) replaced by fakes whose scores follow a table, so that the stages, their
skips, stage 3's keep rule, an interruption and the resume can be held to exact launch counts. The same
flow runs for real on the rehearsal box in tests/integration/test_search.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks import cli
from benchmarks.inventory import Inventory
from benchmarks.search import playbooks, runner
from benchmarks.search import report as search_report
from sglang_layout.candidates import candidate_name, parse_grid

LAYOUTS = {
    "tp8": {"tp": 8},
    "ep8": {"tp": 8, "ep": 8},
    "ep4": {"tp": 8, "ep": 4},
    "broken": {"tp": 8, "ep": 3},  # refused by the fake preflight, as ep 3 not dividing tp is by ours
}
# peak per layout; each knob multiplies it (a value missing here does nothing).
PEAK = {"tp8": 800.0, "ep8": 960.0, "ep4": 1500.0}
C1 = {"tp8": 40.0, "ep8": 65.0, "ep4": 45.0}  # the knobs here change the peak only
GAIN = {("steps", 4): 1.12, ("env.NCCL_P2P_DISABLE", "1"): 1.2, ("steps", 2): 1.02}


class Box:
    """The fakes' record: what was judged and launched, in order."""

    def __init__(self, gain: dict[tuple[str, Any], float], *, stop_after: int | None = None, c1_gain: dict | None = None) -> None:
        self.gain, self.stop_after = gain, stop_after
        self.c1_gain = c1_gain or {}  # (layout, axis, value) -> its factor on C=1 there only
        self.delay = 0.0  # seconds each launch takes
        self.launched: list[str] = []
        self.judged: list[list[str]] = []
        self.together: float | None = None  # a combination's gain, when the knobs do not add up

    def preflight(self, inventory: Path, host: str, layouts: dict[str, Any], version: str = "") -> playbooks.PreflightResult:
        self.judged.append(list(layouts))
        verdicts = {
            name: {"ok": entry.get("ep", 1) != 3, "findings": [] if entry.get("ep", 1) != 3 else [refusal(name)]}
            for name, entry in layouts.items()
        }
        # SGLang's own verdict: steps=1 is its default, so that command resolves to the layout's own server.
        judged = [
            {"name": name, "accepted": True, "resolved": [], "fingerprint": fingerprint(entry)} for name, entry in layouts.items()
        ]
        sglang = {"sglang_version": "0.5.23", "candidates": judged}
        return playbooks.PreflightResult(verdicts, "tp8", {}, sglang, {"gpu_count": 8, "attention_dp": False})

    def deploy(self, inventory: Path, host: str, layout: str, layouts: dict[str, Any], **_: Any) -> playbooks.DeployResult:
        self.launched.append(layout)
        time.sleep(self.delay)
        return playbooks.DeployResult(ok=True, load_s=1.0, message="")

    def measure(self, candidate: Any, entry: dict[str, Any], options: Any, note: Any, identifier: str, host: str) -> str:
        if self.stop_after is not None and len(self.launched) > self.stop_after:
            return "interrupted"
        peak = PEAK[candidate.layout]
        for axis, value in candidate.overrides.items():
            peak *= self.gain.get((axis, value), 1.0)
        if len(candidate.overrides) > 1 and self.together is not None:
            peak = PEAK[candidate.layout] * self.together
        c1 = C1[candidate.layout]
        for axis, value in candidate.overrides.items():
            c1 *= self.c1_gain.get((candidate.layout, axis, value), 1.0)
        record = options.results_dir / f"{candidate.name}.json"
        record.write_text("{}")
        entry.update(status="measured", scores={"c1": c1, "peak": peak}, record=str(record), levels_run=[1, 64])
        return "measured"


def fingerprint(entry: dict[str, Any]) -> str:
    args = {k: v for k, v in (entry.get("args") or {}).items() if not (k == "steps" and v == 1)}
    return json.dumps({"tp": entry.get("tp"), "ep": entry.get("ep"), "args": args}, sort_keys=True)


def refusal(name: str) -> dict[str, str]:
    return {"severity": "error", "message": f"{name}: ep 3 does not divide tp 8", "fix": "choose ep among 1, 2, 4, 8"}


@pytest.fixture
def box(monkeypatch, tmp_path):
    def with_gain(gain=GAIN, **options) -> Box:
        fake = Box(gain, **options)
        monkeypatch.setattr(runner, "read_inventory", lambda _: Inventory({"box": {"sglang_layouts": LAYOUTS}}, {}))
        monkeypatch.setattr(playbooks, "preflight", fake.preflight)
        monkeypatch.setattr(playbooks, "deploy", fake.deploy)
        monkeypatch.setattr(runner, "_measure", fake.measure)
        return fake

    return with_gain


def search(tmp_path: Path, *options: str) -> int:
    argv = ["search", "--server-host", "box", "--inventory", str(tmp_path / "hosts.yml"), "--results-dir", str(tmp_path)]
    args = cli.build_parser().parse_args([*argv, *options])
    grid = [parse_grid(spec) for spec in args.grid]
    return runner.run_search(runner.SearchOptions.from_cli_args(args, grid=grid, api_key=""), say=lambda _: None)


AXES = ("--grid", "steps=2,4", "--grid", "env.NCCL_P2P_DISABLE=0,1")


def stored(results: Path) -> dict[str, Any]:
    (path,) = results.glob("box/searches/*.json")
    return json.loads(path.read_text())


def test_three_stages_launch_the_sum_of_the_values_on_the_best_layouts_and_keep_a_clear_combination(box, tmp_path):
    fake = box()
    assert search(tmp_path, *AXES, "--top", "2") == 0
    stage1, stage2, stage3 = fake.launched[:3], fake.launched[3:11], fake.launched[11:-1]
    assert stage1 == ["tp8", "ep8", "ep4"]  # broken refused by preflight, never launched
    assert {candidate_name(layout, {}) for layout in ("ep8", "ep4")} == {n.split("-g")[0] for n in stage2}
    assert len(stage2) == 2 * 4  # two layouts x (2 + 2 values)
    both = candidate_name("ep4", {"steps": 4, "env.NCCL_P2P_DISABLE": "1"})
    assert stage3 == [both, candidate_name("ep8", {"steps": 4, "env.NCCL_P2P_DISABLE": "1"})]  # best layout first
    assert fake.launched[-1] == both  # the peak winner left serving
    # Preflight judged stages 1 and 2 at once (4 + 4 x 4 candidates), then stage 3's two.
    assert [len(judged) for judged in fake.judged] == [4 + 16, 2]


def test_a_combination_that_does_not_clearly_beat_its_parts_is_recorded_and_is_no_winner(box, tmp_path):
    # Each knob +6% alone, but together no better than the better one alone (they do the same thing).
    fake = box({("steps", 4): 1.06, ("env.NCCL_P2P_DISABLE", "1"): 1.061})
    fake.together = 1.061  # the combination's gain: no more than the better knob alone
    assert search(tmp_path, *AXES, "--top", "1") == 0
    fake_state = stored(tmp_path)
    combos = [e for e in fake_state["candidates"] if e.get("stage") == 3]
    assert len(combos) == 1 and combos[0]["kept"] is False
    assert combos[0]["kept_why"].startswith("not kept: peak +") and "the clear margin is 5%" in combos[0]["kept_why"]
    # Its peak is the highest measured, but a combination that was not kept is not a winner.
    assert fake_state["winners"]["peak"]["name"] == candidate_name("ep4", {"env.NCCL_P2P_DISABLE": "1"})
    assert fake.launched[-1] == fake_state["winners"]["peak"]["name"]


def test_an_interrupted_staged_search_resumes_in_its_stage_and_launches_nothing_twice(box, tmp_path):
    first = box(stop_after=5)  # stopped during stage 2
    assert search(tmp_path, *AXES, "--top", "2") == 130
    again = box()
    assert search(tmp_path, *AXES, "--top", "2") == 0
    assert len(first.launched) == 6  # three of stage 1, two of stage 2 measured, the sixth interrupted
    assert not set(first.launched[:5]) & set(again.launched[:-1])  # nothing finished is launched again
    assert first.launched[5] in again.launched and len(again.launched[:-1]) == 3 + 8 + 2 - 5
    assert search(tmp_path, *AXES, "--top", "2") == 0  # a third run: everything kept


def test_without_a_grid_or_with_the_grid_strategy_there_are_no_stages(box, tmp_path):
    fake = box()
    assert search(tmp_path, *AXES, "--strategy", "grid") == 0
    assert len(fake.launched) == 3 * 4 + 1  # every layout x every combination, the winner left serving
    fake = box()
    assert search(tmp_path / "plain", "--layouts", "tp8,ep4") == 0
    assert fake.launched == ["tp8", "ep4", "ep4"]


def test_a_dry_run_judges_everything_and_writes_nothing(box, tmp_path, capsys):
    fake = box()
    argv = ["search", "--server-host", "box", "--inventory", str(tmp_path / "h.yml"), "--results-dir", str(tmp_path / "r")]
    args = cli.build_parser().parse_args([*argv, "--layouts", "auto,ep4", "--dry-run"])
    options = runner.SearchOptions.from_cli_args(args, grid=[], api_key="")
    said: list[str] = []
    assert runner.run_search(options, say=said.append) == 0
    assert fake.launched == [] and not (tmp_path / "r").exists()
    text = "\n".join(said)
    assert "dry run: would launch 21 candidate(s)" in text  # the 20 shapes of 8 GPUs and ep4
    assert "  tp8-ep4 (tp8-ep4)" in text and "  ep4 (ep4)" in text


def test_every_objective_has_its_incumbent_so_a_c1_knob_on_the_c1_layout_is_found_when_peak_is_the_objective(box, tmp_path):
    """4 continuous decode steps lift C=1 on EP8 only (the C=1 layout); the peak's knobs pay on EP4: one search with
    --objective peak --top 1 varies both layouts and names both winners, each clear."""
    fake = box(c1_gain={("ep8", "steps", 4): 1.25})
    assert search(tmp_path, *AXES, "--top", "1", "--objective", "peak") == 0
    state = stored(tmp_path)
    assert state["explored"]["2"] == {"c1": ["ep8"], "peak": ["ep4"]}
    assert len(fake.launched) == 3 + 2 * 4 + 1 + 1  # stage 1, stage 2 on both, EP4's combination, the winner left
    c1, peak = state["winners"]["c1"], state["winners"]["peak"]
    assert c1["name"] == candidate_name("ep8", {"steps": 4}) and c1["clear"] and "+25.0% over plain ep8 (clear)" in c1["knobs"]
    both = candidate_name("ep4", {"steps": 4, "env.NCCL_P2P_DISABLE": "1"})
    assert peak["name"] == both and peak["clear"] and fake.launched[-1] == both
    skipped = [e for e in state["candidates"] if e["status"] == "skipped" and e["layout"] != "broken"]  # refused layout
    assert {e["layout"] for e in skipped} == {"tp8"} and "c1: ep8; peak: ep4" in skipped[0]["reasons"][0]


def test_a_candidate_sglang_resolves_to_a_measured_server_is_recorded_as_that_one_and_not_launched(box, tmp_path):
    fake = box()
    assert search(tmp_path, "--grid", "steps=1,4", "--top", "1") == 0
    state = stored(tmp_path)
    twin = next(e for e in state["candidates"] if e["name"] == candidate_name("ep4", {"steps": 1}))
    assert twin["same_server_as"] == "ep4" and twin["status"] == "measured" and twin["name"] not in fake.launched
    base = next(e for e in state["candidates"] if e["name"] == "ep4")
    assert twin["scores"] == base["scores"] and twin["record"] == base["record"]
    assert fake.launched.count("ep4") == 1 and candidate_name("ep4", {"steps": 4}) in fake.launched
    # The manifest keeps what the report prints: what each knob did, and the launches with the twin never made.
    assert state["launches"]["launched"] == len(fake.launched) - 1  # the last is the winner left serving
    twins = sum(1 for e in state["candidates"] if e.get("same_server_as"))
    assert state["launches"]["same_server"] == twins >= 1 and state["launches"]["full_grid"] > state["launches"]["launched"]
    rows = {row["name"]: row for row in state["effects"]}
    assert rows[twin["name"]]["objectives"]["peak"]["change"] == 0.0 and rows[twin["name"]]["layout"] == "ep4"
    assert search_report.effect_rows(state)[1]  # the report's table reads the same rows


def test_a_budget_leaves_out_the_launches_that_cannot_fit_lists_them_and_still_names_winners(box, tmp_path):
    fake = box()
    fake.delay = 0.2  # a launch takes 0.2 s here: after two, a third would end past 0.5 s
    assert search(tmp_path, *AXES, "--top", "1", "--budget", "0.5s") == 0
    state = stored(tmp_path)
    over = {e["name"] for e in state["candidates"] if "--budget" in " ".join(e.get("reasons") or [])}
    assert fake.launched[:2] == ["tp8", "ep8"] and "ep4" in over and len(over) > 1  # and the stage-2 candidates
    assert all(e["status"] == "skipped" for e in state["candidates"] if e["name"] in over)
    assert state["winners"]["peak"]["name"] == "ep8" and fake.launched[-1] == "ep8"  # the best measured, left serving
    said = search_report.economy(state)
    assert f"{len(over)} left out by the --budget" in said
