"""The rehearsal run (README's main job, no GPU): the real playbooks against a fresh rehearsal box whose
edges are stand-ins (nvidia-smi, NVIDIA's apt repo, the sglang package), showing the whole path:

preflight -> provision -> deploy ep8 -> deploy again (no change) -> benchmark ep8 -> swap to tp8 ->
a refused layout (tp2ep4) -> the same layout forced with preflight off: crash diagnosed, tp8 back ->
preflight on the box, our verdicts beside the installed SGLang's own (one refusal, one rewrite) ->
a layout only SGLang refuses, refused before anything stops -> status -> the layout search, staged: every
declared layout, then a flag and an environment value on the best (refusals, one launch each, what each knob
did, winners, the winner left serving) -> the runs compared.

REHEARSAL_SIMULATION=FILE replaces the simulated box (GPUs, weights, token clocks per layout; the
stand-in's schema), to check that the search follows the clock, not the layout names.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.rehearsal import apt_repo, gpu_host, stopping
from tests.rehearsal import box as boxes
from tests.rehearsal.bench import benchmarks, on_box
from tests.rehearsal.playbook import REPO, PlaybookRun, run_playbook

LEVELS = "1,8,32"
SEARCH_LEVELS = "1,16,64"
# The staged search's axes on the best layout for peak: a flag and an environment value (gpu_host.GPU_HOST's effects).
# 1 decode step is SGLang's default: those candidates are their layouts' own servers, recorded, never launched.
SEARCH_KNOBS = ("--grid", "num-continuous-decode-steps=1,4", "--grid", "env.NCCL_P2P_DISABLE=0,1", "--top", "1")
# Every declared layout. ep8-tuned decodes on EP8's clock here, so which of the two leads an objective is noise:
# the tie rule varies one of them, and tokens per joule from the one or two power samples of these short levels
# never count as clear (objectives.MIN_POWER_SAMPLES), so that noise cannot make the other an incumbent too.
SEARCH_LAYOUTS = ("--layouts", "tp8,pp8,ep8,ep8-tuned,ep4,tp4ep2,tp2ep4")
OFFLINE_PREFLIGHT = {
    "layout": "ep8",
    "gpu_count": 8,
    "gpu_memory_gib": 94.97,
    "model_config_path": str(gpu_host.KIMI_CONFIG),
    "flag_table_path": str(REPO / "tests" / "data" / "sglang-0.5.23-flags.json"),
}
# Two layouts for SGLang's own verdict: one our rules pass and SGLang's argument checks refuse (the stand-in
# imitates the real parallel_hook.py), one our rules refuse and SGLang would rewrite (ep 4 -> 8 under deepep).
SGLANG_JUDGED = {
    "dcpq": {
        "description": "replicated q projection without decode context parallelism",
        "tp": 8,
        "args": {"dcp-replicate-q-proj": True},
    },
    "ep4-deepep": {"description": "EP4 with the DeepEP all-to-all", "tp": 8, "ep": 4, "args": {"moe-a2a-backend": "deepep"}},
}


def step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def debug_lines(run: PlaybookRun, marker: str) -> list[str]:
    """The string lines a debug task printed after the task header containing `marker`."""
    start = run.stdout.find(marker)
    block = run.stdout[start:].split("\n\n", 1)[0] if start >= 0 else ""
    return [line.strip().strip('",') for line in block.splitlines() if line.strip().startswith('"') and '"msg"' not in line]


def error_text(run: PlaybookRun) -> str:
    """The message of the task that failed the run (the last [ERROR]; earlier ones were rescued)."""
    start = run.stdout.rfind("[ERROR]: Task failed: ")
    text = run.stdout[start:].split("\nOrigin:", 1)[0] if start >= 0 else run.output[-1500:]
    return text.replace("[ERROR]: Task failed: Action failed: ", "").replace("[ERROR]: Task failed: ", "")


def report(run: PlaybookRun, host: str, started: float) -> str:
    counts = run.recap.get(host, {})
    verdict = "ok" if run.returncode == 0 else f"FAILED (rc {run.returncode})"
    return f"{verdict}, changed={counts.get('changed', '?')}, {time.monotonic() - started:.1f} s"


def main() -> int:
    stopping.stop_like_ctrl_c()  # a `kill` tears the box down as Ctrl-C does
    checks: list[bool] = []
    simulation = None
    if os.environ.get("REHEARSAL_SIMULATION"):
        try:
            simulation = gpu_host.read_simulation(Path(os.environ["REHEARSAL_SIMULATION"]))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"simulated box from {os.environ['REHEARSAL_SIMULATION']}")
    step("preflight on the controller, no host: ansible-playbook playbooks/preflight.yml -e layout=ep8 ...")
    started = time.monotonic()
    run = run_playbook("playbooks/preflight.yml", REPO / "inventory" / "hosts.yml", OFFLINE_PREFLIGHT)
    print("\n".join(debug_lines(run, "Preflight | Show the verdicts")))
    print(f"-> {report(run, 'gpu-box-1', started)}")
    checks.append(run.returncode == 0)

    with tempfile.TemporaryDirectory() as tmp, apt_repo.served(Path(tmp) / "repo") as repo:
        step("a fresh Debian 12 box with systemd, reached over SSH (stand-ins: nvidia-smi, CUDA repo, sglang wheels)")
        started = time.monotonic()
        with boxes.running_box() as box:
            port = boxes.free_port()
            inventory = gpu_host.prepare(box, Path(tmp) / "inventory", repo.base_url, simulation, **gpu_host.serving_vars(port))
            print(f"{box.name} up in {time.monotonic() - started:.1f} s; the server will listen on 127.0.0.1:{port}")

            def play(title: str, playbook: str, *options: str) -> PlaybookRun:
                step(f"{title}: ansible-playbook {playbook} {' '.join(options)}".rstrip())
                began = time.monotonic()
                done = run_playbook(playbook, inventory, None, *options)
                print(f"-> {report(done, box.name, began)}")
                return done

            done = play("provision", "playbooks/provision.yml")
            checks.append(done.returncode == 0)
            if done.returncode != 0:
                print(done.output[-3000:])
                return 1
            checks.append(play("provision again", "playbooks/provision.yml").changed(box.name) == 0)

            results = Path(tmp) / "results"

            def benchmark(layout: str) -> bool:
                step(f"benchmark {layout}: python -m benchmarks run --server-host {box.name} --levels {LEVELS}")
                done = benchmarks(
                    "run",
                    *on_box(box.name, inventory),
                    "--levels",
                    LEVELS,
                    "--output-tokens",
                    "64",
                    "--rounds",
                    "2",
                    "--min-requests",
                    "4",
                    "--results-dir",
                    str(results),
                    capture=False,
                    timeout=3600,
                )
                return done.returncode == 0

            for layout, again in (("ep8", False), ("ep8", True), ("tp8", False)):
                done = play(f"deploy {layout}" + (" again" if again else ""), "deploy.yml", "-e", f"layout={layout}")
                checks.append(done.returncode == 0 and (done.changed(box.name) == 0 or not again))
                if done.returncode == 0 and layout == "ep8" and not again:
                    checks.append(benchmark(layout))

            done = play("deploy tp2ep4 (refused by preflight, tp8 untouched)", "deploy.yml", "-e", "layout=tp2ep4")
            print(error_text(done))
            checks.append(done.returncode != 0 and done.changed(box.name) == 0)

            done = play(
                "deploy tp2ep4 with preflight off (crashes, is diagnosed, tp8 comes back)",
                "deploy.yml",
                "-e",
                "layout=tp2ep4",
                "-e",
                "preflight=false",
            )
            print(error_text(done))
            checks.append(done.returncode != 0 and "Rolled back: sglang-k26-tp8.service is serving again" in done.stdout)

            declared = yaml.safe_load((REPO / "group_vars" / "sglang_servers.yml").read_text())["sglang_layouts"]
            judged = {"sglang_layouts": {**declared, **SGLANG_JUDGED}}
            step("preflight on the box, beside the installed SGLang's own checks: ansible-playbook playbooks/preflight.yml")
            began = time.monotonic()
            done = run_playbook("playbooks/preflight.yml", inventory, judged)
            print("\n".join(debug_lines(done, "Preflight | Show SGLang's own verdict beside ours")))
            print(f"-> {report(done, box.name, began)}")
            checks.append(done.returncode == 0 and "dcpq: ours ok, SGLang refuses" in done.stdout)

            step("deploy dcpq (our rules pass it, SGLang's own check refuses it; tp8 untouched): ansible-playbook deploy.yml")
            began = time.monotonic()
            done = run_playbook("deploy.yml", inventory, judged, "-e", "layout=dcpq")
            print(error_text(done))
            print(f"-> {report(done, box.name, began)}")
            checks.append(done.returncode != 0 and done.changed(box.name) == 0)

            done = play("status", "playbooks/status.yml")
            print("\n".join(debug_lines(done, "Status | Report")))
            checks.append(done.returncode == 0 and "active layout: tp8" in done.stdout)

            step(
                f"the layout search, staged: python -m benchmarks search --server-host {box.name} --levels {SEARCH_LEVELS}"
                f" {' '.join((*SEARCH_LAYOUTS, *SEARCH_KNOBS))}"
            )
            done = benchmarks(
                "search",
                *on_box(box.name, inventory),
                "--levels",
                SEARCH_LEVELS,
                *SEARCH_LAYOUTS,
                *SEARCH_KNOBS,
                "--output-tokens",
                "32",
                "--rounds",
                "2",
                "--min-requests",
                "4",
                "--metrics-interval",
                "0",
                "--results-dir",
                str(results),
                capture=False,
                timeout=3600,
            )
            checks.append(done.returncode == 0)
            if simulation is None:
                print(
                    "(the simulated box follows the field notes' table: per request at C=1 EP8 65, PP8 37, TP8 26.3 tok/s;"
                    " peak aggregate EP4 1,531, EP8 961, TP8 808, PP8 396; 4 continuous decode steps make EP8's"
                    " inter-token time 20% shorter and EP4's roofline 12% higher, NCCL_P2P_DISABLE=1 EP4's roofline"
                    " 20% higher above C=16)"
                )
                # Each objective's winner searched and each decision clear (the layout, then its knobs).
                winners = next(iter(results.glob("*/searches/*.json")), None)
                found = json.loads(winners.read_text())["winners"] if winners else {}
                checks.append(all(found.get(objective, {}).get("clear") for objective in ("c1", "peak")))

            step(f"every run side by side: python -m benchmarks compare {results}")
            compared = benchmarks("compare", str(results), capture=False)
            checks.append(compared.returncode == 0)
        step("box torn down")
    print("rehearsal: " + ("every step behaved as expected" if all(checks) else f"UNEXPECTED results: {checks}"))
    return 0 if all(checks) else 1


def stopped_in_order() -> int:
    """main(), where an interrupt (Ctrl-C, SIGTERM, SIGHUP) ends with everything torn down and says so."""
    try:
        return main()
    except KeyboardInterrupt as interrupt:
        print(f"\nrehearsal stopped ({interrupt or 'Ctrl-C'}): its box and local servers are torn down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(stopped_in_order())
