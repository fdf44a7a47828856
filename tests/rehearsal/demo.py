"""The rehearsal run (README's main job, no GPU): preflight the declared layouts, then launch two of
them on a fresh rehearsal box with the STAND-IN sglang: ep8 (accepted) serves, tp2ep4 (refused by
preflight) crashes exactly as predicted. Deploy/swap and the benchmark sweep join this run as those
parts land.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sglang_layout import command
from sglang_layout.sources import declaration_from_vars, load_yaml_vars
from tests.rehearsal import box as boxes
from tests.rehearsal.standin import stream_chat, wait_http, wheelhouse, write_simulation

REPO = Path(__file__).resolve().parents[2]
KIMI = REPO / "examples" / "models" / "kimi-k2.6" / "config.json"
# The simulated box: the field notes' GPUs and a ~1T INT4 model; EP8's C=1 rate of 65 tok/s.
SIMULATION = {"gpu_count": 8, "gpu_memory_gib": 94.97, "weights_gib": 553, "load_seconds": 3,
              "itl_ms": {"default": 38.0, "tp8-ep8-pp1-dp1": 15.4}, "itl_slope_ms": 0.2}  # fmt: skip


def step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def preflight() -> None:
    step("preflight (controller only, no host): ansible-playbook playbooks/preflight.yml -e layout=ep8")
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["ansible-playbook", "playbooks/preflight.yml", "-e", "layout=ep8", "-e", "gpu_count=8", "-e", "gpu_memory_gib=94.97",
         "-e", f"model_config_path={KIMI}", "-e", f"flag_table_path={REPO}/tests/data/sglang-0.5.23-flags.json"],
        cwd=REPO, capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    table = [line.strip().strip('",') for line in done.stdout.splitlines() if line.strip().startswith('"') and "msg" not in line]
    print("\n".join(table))
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-2000:])
        raise SystemExit("preflight failed")


def launch(box: boxes.Box, name: str, unit: str, port: int) -> None:
    declaration = declaration_from_vars(load_yaml_vars([REPO / "group_vars" / "sglang_servers.yml"]))
    args = command.server_args(declaration.layouts[name], model_path="/models/kimi-k2.6", port=port, host="127.0.0.1")
    argv = command.launch_command("/opt/sglang/bin/python", args)
    print("rendered:", command.shell_line(argv))
    box.run("sudo", "systemd-run", "--unit", unit, "--property", "Restart=no", *argv)


def main() -> int:
    preflight()
    step("rehearsal box: boot a fresh Debian with systemd over SSH")
    started = time.monotonic()
    with boxes.running_box() as box:
        print(f"{box.name} up in {time.monotonic() - started:.1f} s (ssh port {box.ssh_port})")
        step("stand-in sglang 0.5.23 from a local wheelhouse into /opt/sglang")
        subprocess.run(["cp", "-r", wheelhouse(), str(box.root / "opt" / "wheelhouse")], check=True)
        box.run("sudo", "python3", "-m", "venv", "/opt/sglang")
        box.run("sudo", "/opt/sglang/bin/pip", "install", "-q", "--no-index", "--find-links", "/opt/wheelhouse", "sglang==0.5.23",
                timeout=300)  # fmt: skip
        box.run("sudo", "mkdir", "-p", "/models/kimi-k2.6")
        (box.root / "models" / "kimi-k2.6" / "config.json").write_text(KIMI.read_text())
        write_simulation(box.root / "etc" / "sglang-standin.json", **SIMULATION)
        port = boxes.free_port()

        step("launch ep8 (preflight: ok)")
        launch(box, "ep8", "sglang-k26-ep8", port)
        status = wait_http(f"http://127.0.0.1:{port}/health_generate", 60)
        print(f"/health_generate -> {status}")
        tokens, rate = stream_chat(f"http://127.0.0.1:{port}", 64)
        expected = 1000 / (15.4 + SIMULATION["itl_slope_ms"])  # one running request
        print(f"one streamed request: {tokens} tokens at {rate:.1f} tok/s (stand-in's clock: {expected:.1f})")
        box.run("sudo", "systemctl", "stop", "sglang-k26-ep8")

        step("launch tp2ep4 anyway (preflight: REJECTED, ep must divide tp)")
        launch(box, "tp2ep4", "sglang-k26-tp2ep4", port)
        time.sleep(SIMULATION["load_seconds"] + 1)
        journal = box.run("sudo", "journalctl", "-u", "sglang-k26-tp2ep4", "--no-pager", "-o", "cat").stdout
        crash = [line for line in journal.splitlines() if "Error" in line]
        print("journal:", crash[-1] if crash else "(no error seen)")
    step("box torn down; done")
    return 0 if status == 200 and crash else 1


if __name__ == "__main__":
    sys.exit(main())
