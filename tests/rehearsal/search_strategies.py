"""`python -m tests.rehearsal.search_strategies`: the staged search against the full grid, once each, on one
provisioned rehearsal box (a benchmark, not a test; docs/search.md has its figures).

`--example` instead runs the one search whose report docs/search.md shows: EP8 and EP4 on a box where EP4
hangs above 16 requests unless NCCL peer-to-peer is off, with the power limit as an axis and GPU telemetry,
so the report has startup phases, a hang and tokens per joule.

The simulated box is the field notes' (tests/rehearsal/gpu_host.py) with its two knobs that pay: 4
continuous decode steps (inter-token time x 0.8, roofline x 1.12) and NCCL_P2P_DISABLE=1 (roofline x 1.2
above C=16). Both searches get the same layouts, axes and workload; the script prints each one's
launches, wall time and winners (layout and the values that decide the objective), then the ratios.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from tests.rehearsal import apt_repo, gpu_host, stopping
from tests.rehearsal import box as boxes
from tests.rehearsal.bench import benchmarks, on_box
from tests.rehearsal.playbook import run_playbook

LAYOUTS = "tp8,pp8,ep8,ep4"
AXES = ("--grid", "num-continuous-decode-steps=2,4", "--grid", "env.NCCL_P2P_DISABLE=0,1")
WORKLOAD = ("--levels", "1,16,64", "--knee", "0.25", "--output-tokens", "32", "--rounds", "2", "--min-requests", "4")
WORKLOAD += ("--metrics-interval", "0", "--leave", "none")


def winners(manifest: dict) -> dict[str, str]:
    """Per objective: the winner's layout and the values it runs with (its label), and whether it is clear."""
    by_name = {entry["name"]: entry for entry in manifest["candidates"]}
    said = {}
    for objective, best in manifest["winners"].items():
        said[objective] = f"{by_name[best['name']]['label']} ({'clear' if best['clear'] else 'not clear'})"
    return said


def searched(box: boxes.Box, inventory: Path, results: Path, strategy: str) -> tuple[dict, float]:
    manifest, wall, _ = timed_search(box.name, inventory, results, strategy, "--layouts", LAYOUTS, *AXES, *WORKLOAD)
    return manifest, wall


def timed_search(box_name: str, inventory: Path, results: Path, strategy: str, *options: str) -> tuple[dict, float, str]:
    """One search with this strategy on the box: its stored manifest, its wall time and what it printed."""
    began = time.monotonic()
    where = ("--results-dir", str(results))
    done = benchmarks("search", *on_box(box_name, inventory), "--strategy", strategy, *options, *where, timeout=7200)
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"the {strategy} search failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return stored_manifest(results), wall, done.stdout


def stored_manifest(results: Path) -> dict:
    (path,) = results.glob("*/searches/*.json")
    return json.loads(path.read_text())


EXAMPLE_AXES = ("--grid", "env.NCCL_P2P_DISABLE=0,1", "--grid", "host.power_limit=300,none")
EXAMPLE_WORKLOAD = ("--levels", "1,16,64", "--output-tokens", "64", "--rounds", "3", "--min-requests", "8")
EXAMPLE_WORKLOAD += ("--metrics-interval", "0", "--gpu-interval", "1", "--stall-timeout", "10", "--objective", "peak")


def example_simulation() -> dict:
    """The field notes' box where EP4 hangs above 16 requests (NCCL peer-to-peer), cured by NCCL_P2P_DISABLE=1."""
    effects = [
        {**effect, "cures_hang": True} if effect.get("env") == "NCCL_P2P_DISABLE" else effect
        for effect in gpu_host.GPU_HOST["effects"]
    ]
    return {**gpu_host.GPU_HOST, "effects": effects, "hang_above": {"tp8-ep4-pp1-dp1": 16}}


def example(box: boxes.Box, inventory: Path, results: Path) -> int:
    done = benchmarks(
        "search",
        *on_box(box.name, inventory),
        *("--layouts", "ep8,ep4", *EXAMPLE_AXES, *EXAMPLE_WORKLOAD, "--results-dir", str(results)),
        timeout=3600,
    )
    print(done.stdout)
    print(done.stderr[-3000:], file=sys.stderr)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    stopping.stop_like_ctrl_c()
    shown = "--example" in (sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as tmp, apt_repo.served(Path(tmp) / "repo") as repo, boxes.running_box() as box:
        simulation = example_simulation() if shown else None
        serving = gpu_host.serving_vars(boxes.free_port())
        inventory = gpu_host.prepare(box, Path(tmp) / "inventory", repo.base_url, simulation, **serving)
        provisioned = run_playbook("playbooks/provision.yml", inventory)
        if provisioned.returncode != 0:
            print(provisioned.output[-3000:])
            return 1
        run_playbook("deploy.yml", inventory, None, "-e", "layout=tp8").succeeded()
        if shown:
            return example(box, inventory, Path(tmp) / "example")
        figures = {}
        for strategy in ("staged", "grid"):
            manifest, wall = searched(box, inventory, Path(tmp) / strategy, strategy)
            launched = [e for e in manifest["candidates"] if e["status"] not in ("refused", "pending", "skipped")]
            figures[strategy] = (len(launched), wall, winners(manifest))
            print(f"{strategy}: {len(launched)} launches, {wall:.0f} s")
            for objective, said in winners(manifest).items():
                print(f"  winner {objective}: {said}")
    (staged_n, staged_s, _), (grid_n, grid_s, _) = figures["staged"], figures["grid"]
    print(f"staged / grid: launches {staged_n}/{grid_n} = {staged_n / grid_n:.2f}, wall time {staged_s / grid_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
