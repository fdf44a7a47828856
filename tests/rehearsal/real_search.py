"""`python -m tests.rehearsal.real_search`: the staged search against the full grid over real knobs of the REAL
sglang 0.5.23 on CPU (the tiny model), once each, on one rehearsal box (a benchmark, not a test: run once per
release, about half an hour here; docs/search.md has its figures).

Both searches get the same layout, the same three axes of SGLang's own flags and the same workload; the real
server decides what each knob does, and SGLang's own verdict (the fingerprint) decides which candidates are
the same server. The script prints each one's launches, wall time and winners, then the ratios.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

from tests.rehearsal import apt_repo, real_server, real_sglang, stopping
from tests.rehearsal import real_box as real_boxes
from tests.rehearsal.playbook import run_playbook
from tests.rehearsal.search_strategies import timed_search, winners

LAYOUTS = {"cpu-a": {"tp": 1}}
AXES = ("--grid", "num-continuous-decode-steps=1,4", "--grid", "schedule-policy=fcfs,lpm")
AXES += ("--grid", "max-running-requests=2,16")
WORKLOAD = ("--endpoint", "generate", "--levels", "1,4,8", "--output-tokens", "32", "--input-tokens", "16")
WORKLOAD += ("--min-requests", "8", "--rounds", "2", "--metrics-interval", "0", "--gpu-interval", "0", "--leave", "none")


def searched(box_name: str, inventory: Path, results: Path, strategy: str, vocab: int) -> tuple[dict, float]:
    options = ("--layouts", ",".join(LAYOUTS), *AXES, *WORKLOAD, "--vocab-size", str(vocab))
    manifest, wall, printed = timed_search(box_name, inventory, results, strategy, *options)
    print(printed[-6000:])
    return manifest, wall


def main() -> int:
    stopping.stop_like_ctrl_c()
    python = real_sglang.install()
    vocab = real_server.vocab_size(python)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        repo = stack.enter_context(apt_repo.served(tmp / "repo"))
        box, inventory, _ = stack.enter_context(real_boxes.provisioned(python, repo.base_url, tmp / "inventory", LAYOUTS))
        run_playbook("deploy.yml", inventory, None, "-e", "layout=cpu-a", timeout=1800).succeeded()
        figures = {}
        for strategy in ("staged", "grid"):
            manifest, wall = searched(box.name, inventory, tmp / strategy, strategy, vocab)
            launched, twins = manifest["launches"]["launched"], manifest["launches"]["same_server"]
            figures[strategy] = (launched, wall)
            print(f"{strategy}: {launched} launches ({twins} the same server as one measured, not launched), {wall:.0f} s")
            for objective, said in winners(manifest).items():
                print(f"  winner {objective}: {said}")
    (staged_n, staged_s), (grid_n, grid_s) = figures["staged"], figures["grid"]
    print(f"staged / grid: launches {staged_n}/{grid_n} = {staged_n / grid_n:.2f}, wall time {staged_s / grid_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
