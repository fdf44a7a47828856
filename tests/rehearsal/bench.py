"""Running `python -m benchmarks` from tests and the rehearsal, the way a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.rehearsal import stopping

REPO = Path(__file__).resolve().parents[2]


# Its sitecustomize keeps the compiled code of the Ansible modules that run on this machine (about 0.1 s each).
CONTROLLER_SITE = Path(__file__).with_name("controller_site")


def tool_env(**extra: str) -> dict[str, str]:
    """This environment with the running interpreter's bin first, where ansible-runner finds ansible-playbook,
    and CONTROLLER_SITE on the Python path of what it starts."""
    path = os.pathsep.join(filter(None, (str(CONTROLLER_SITE), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": path, **extra}


def benchmarks_argv(*args: str, module: str = "benchmarks") -> list[str]:
    return [sys.executable, "-m", module, *args]


def on_box(box: str, inventory: Path) -> list[str]:
    """The options that point a run at a deployed box through the inventory."""
    return ["--server-host", box, "--inventory", str(inventory)]


def benchmarks(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, capture: bool = True, module: str = "benchmarks"
) -> subprocess.CompletedProcess:
    """`python -m benchmarks ARGS...` from the repository root; the output captured unless `capture` is off.
    `module` runs it through a wrapper instead (tests/rehearsal/measured_alone.py)."""
    pipe = subprocess.PIPE if capture else None
    return stopping.run(
        benchmarks_argv(*args, module=module),
        cwd=REPO,
        stdout=pipe,
        stderr=pipe,
        text=True,
        env=tool_env(**(env or {})),
        timeout=timeout,
    )
