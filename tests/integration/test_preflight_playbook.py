"""playbooks/preflight.yml end to end through ansible-playbook, with no host (the inventory's is unreachable)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OFFLINE = [
    "-e",
    "gpu_count=8",
    "-e",
    "gpu_memory_gib=94.97",
    "-e",
    f"model_config_path={REPO}/examples/models/kimi-k2.6/config.json",
    "-e",
    f"flag_table_path={REPO}/tests/data/sglang-0.5.23-flags.json",
]


def preflight(*extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["ansible-playbook", "playbooks/preflight.yml", *OFFLINE, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_accepted_layout_prints_the_table_and_exits_0():
    started = time.monotonic()
    done = preflight("-e", "layout=ep8")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "REJECTED (ep-divides-tp, memory, moe-tp-width)" in done.stdout
    assert "unreachable=0" in done.stdout and "failed=0" in done.stdout
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        ("tp2ep4", "ep 4 does not divide tp 2. Fix: SGLang nests EP inside TP: on 8 GPUs write tp 8, ep 4"),
        ("tp4ep2", "tp4ep2 uses 4 GPUs; weights ~"),
    ],
)
def test_refused_layouts_fail_with_their_reasons(layout, reason):
    done = preflight("-e", f"layout={layout}")
    assert done.returncode == 2, done.stdout
    assert f"preflight refused layout {layout}" in done.stdout and reason in done.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("-e", "layout=ep16"), "layout = 'ep16': is not declared in sglang_layouts. Fix: use one of: tp8, pp8"),
        (("-e", "layout=ep8", "-e", "gpu_count=eight"), "gpu_count = 'eight': must be a whole number"),
        (("-e", "layout=ep8", "-e", "model_config_path=/nonexistent/config.json"), "file not found"),
        (
            ("-e", "layout=ep8", "-e", '{"sglang_layouts": {"ep8": {"tp": "8"}}}'),
            "sglang_layouts.ep8.tp = '8': must be a whole number",
        ),
    ],
)
def test_bad_input_is_named(extra, message):
    done = preflight(*extra)
    assert done.returncode != 0
    assert message in done.stdout.replace("\n", " ")
