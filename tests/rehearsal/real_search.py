"""`python -m tests.rehearsal.real_search`: the staged search against the full grid over real knobs of the REAL
sglang 0.5.23 on CPU (the tiny model), once each, on one rehearsal box (a benchmark, not a test: run once per
release, about half an hour here; docs/search.md has its figures).

Both searches get the same layout, the same three axes of SGLang's own flags and the same workload; the real
server decides what each knob does, and SGLang's own verdict (the fingerprint) decides which candidates are
the same server. The script prints each one's launches, wall time and winners, each launch's figures in
the order they ran, then the ratios. Last, plain cpu-a is launched and measured once more (a one-candidate
search): the same server measured at the start and at the end says how far one launch's figures stray from
another's, which decides what "clear" can mean here. The results are kept (their folder is printed).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.rehearsal import apt_repo, real_server, real_sglang, stopping
from tests.rehearsal import real_box as real_boxes
from tests.rehearsal.playbook import run_playbook
from tests.rehearsal.search_strategies import timed_search, winners

LAYOUTS = {"cpu-a": {"tp": 1}}
AXES = ("--grid", "num-continuous-decode-steps=1,4", "--grid", "schedule-policy=fcfs,lpm")
AXES += ("--grid", "max-running-requests=2,16")
WORKLOAD = ("--endpoint", "generate", "--levels", "1,4,8", "--output-tokens", "32", "--input-tokens", "16")
WORKLOAD += ("--min-requests", "8", "--rounds", "2", "--metrics-interval", "0", "--gpu-interval", "0", "--leave", "none")


def searched(box_name: str, inventory: Path, results: Path, strategy: str, vocab: int, *axes: str) -> tuple[dict, float]:
    options = ("--layouts", ",".join(LAYOUTS), *axes, *WORKLOAD, "--vocab-size", str(vocab))
    manifest, wall, printed = timed_search(box_name, inventory, results, strategy, *options)
    print(printed[-6000:])
    return manifest, wall


def launches(manifest: dict[str, Any]) -> list[str]:
    """Each measured candidate's line, in the order it ran: its values, C=1 and peak tok/s, or the twin it is."""
    measured = [entry for entry in manifest["candidates"] if entry["status"] == "measured"]
    measured.sort(key=lambda entry: entry.get("started") or "~")  # the twins, never started, last
    lines = []
    for entry in measured:
        scores = entry["scores"]
        twin = f" = {entry['same_server_as']}, not launched" if entry.get("same_server_as") else ""
        lines.append(f"  {entry['label']:<70} c1 {scores['c1']:7.1f}  peak {scores['peak']:7.1f}{twin}")
    return lines


def main() -> int:
    stopping.stop_like_ctrl_c()
    python = real_sglang.install()
    vocab = real_server.vocab_size(python)
    kept = Path(tempfile.mkdtemp(prefix="real-search-"))
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        repo = stack.enter_context(apt_repo.served(tmp / "repo"))
        box, inventory, _ = stack.enter_context(real_boxes.provisioned(python, repo.base_url, tmp / "inventory", LAYOUTS))
        # The box keeps the weights as torch saves them (0600), for the real tier's refusal test: readable here.
        box.run("sudo", "chmod", "-R", "a+rX", "/srv/models/tiny-llama")
        run_playbook("deploy.yml", inventory, None, "-e", "layout=cpu-a", timeout=1800).succeeded()
        figures, lines = {}, {}
        for strategy in ("staged", "grid"):
            manifest, wall = searched(box.name, inventory, kept / strategy, strategy, vocab, *AXES)
            launched, twins = manifest["launches"]["launched"], manifest["launches"]["same_server"]
            figures[strategy] = (launched, wall)
            lines[strategy] = launches(manifest)
            print(f"{strategy}: {launched} launches ({twins} the same server as one measured, not launched), {wall:.0f} s")
            for objective, said in winners(manifest).items():
                print(f"  winner {objective}: {said}")
        again, _ = searched(box.name, inventory, kept / "plain-again", "grid", vocab)
    for strategy, measured in lines.items():
        print(f"{strategy}, each launch in the order it ran:", *measured, sep="\n")
    print("plain cpu-a again, last:", *launches(again), sep="\n")
    (staged_n, staged_s), (grid_n, grid_s) = figures["staged"], figures["grid"]
    print(f"staged / grid: launches {staged_n}/{grid_n} = {staged_n / grid_n:.2f}, wall time {staged_s / grid_s:.2f}")
    print(f"results kept in {kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
