"""The GPUs' side and the bottleneck line in the reports: the level table, compare and the search report."""

from __future__ import annotations

import json

from benchmarks import compare, report
from benchmarks.search import report as search_report
from benchmarks.search.runner import _gpu_curve, _held_back
from tests.unit.test_search import _state


def gpus(sm: float, pcie: float) -> dict:
    def figure(value: float) -> dict:
        return {"mean": value, "p50": value, "p95": value}

    per_gpu = {name: figure(10.0) for name in ("mem", "fb", "pwr")}
    per_gpu |= {"sm": figure(sm), "rxpci": figure(pcie / 2), "txpci": figure(pcie / 2)}
    return {"interval_s": 1, "samples": 4, "per_gpu": {"0": per_gpu, "1": {**per_gpu, "sm": figure(0.0)}}}


def measured_level(concurrency: int, aggregate: float, sm: float, held: str) -> dict:
    return {
        "concurrency": concurrency,
        "status": "ok",
        "completed": 8,
        "failed": 0,
        "aggregate_tok_s": aggregate,
        "decode_tok_s": {"p50": 60.0},
        "ttft_ms": {"p50": 30.0, "p99": 40.0},
        "itl_ms": {"p50": 15.0, "p99": 16.0},
        "e2e_ms": {"p50": 900.0},
        "achieved_concurrency": float(concurrency),
        "gpus": gpus(sm, 40.0 * concurrency),
        "bottleneck": {"name": held, "evidence": f"because of C={concurrency}"},
    }


LEVELS = [measured_level(1, 65.0, 6.0, "not identified"), measured_level(64, 961.0, 95.0, "GPU compute")]


def test_the_level_table_shows_the_busiest_gpu_and_what_held_each_level_back():
    text = report.level_table(LEVELS)
    assert "GPU SM %" in text and "PCIe MB/s" in text
    assert "C=1 held back by not identified: because of C=1" in text
    assert "C=64 held back by GPU compute: because of C=64" in text
    assert "GPU SM %" not in report.level_table([{**level, "gpus": None} for level in LEVELS])


def test_compare_names_what_held_each_layout_back_at_its_peak_and_plots_the_gpus(tmp_path):
    run = {"server": {"host": "box", "layout": "ep8"}, "status": "complete", "levels": LEVELS}
    path = tmp_path / "box" / "ep8" / "run.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(run))
    row = compare.summarize_run(path, run)
    assert row["held_back"] == "GPU compute" and row["gpu_curve"] == [(1, 6.0, 40.0), (64, 95.0, 2560.0)]
    assert "held back at peak" in compare.table([row]) and "GPU compute" in compare.table([row])
    compare.plot([row], tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_the_search_report_says_what_held_each_candidate_back_at_its_peak(tmp_path):
    scores = {"c1": 65.0, "peak": 961.0, "peak_c": 64}
    held = _held_back(LEVELS, scores)
    assert held == {"level": 64, "name": "GPU compute", "evidence": "because of C=64"}
    assert _gpu_curve(LEVELS) == [[1, 6.0, 40.0], [64, 95.0, 2560.0]]
    state = _state()
    state["candidates"][0] |= {"held_back": held, "gpu_curve": _gpu_curve(LEVELS)}
    text = search_report.text(state, {})
    assert "what held each candidate back at its peak level:\nep8 (C=64): GPU compute: because of C=64" in text
    outputs = search_report.write(state, tmp_path / "abc.json", {})
    assert "## What held each candidate back" in outputs["markdown"].read_text()
    assert outputs["plot"].read_bytes()[:4] == b"\x89PNG"
