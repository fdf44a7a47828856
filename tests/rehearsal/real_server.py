"""The REAL sglang server on CPU with the tiny model (tests and the cross-check only): start, wait, stop."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.rehearsal import real_sglang, tiny_model
from tests.rehearsal.box import CACHE, free_port
from tests.rehearsal.standin import wait_http
from tests.rehearsal.stopping import die_with_parent


def _before_exec(cpus: set[int] | None) -> None:
    """In the server's child before exec: pinned to `cpus` if given, and ended with the test process."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    die_with_parent()


@contextlib.contextmanager
def running(log: Path, *flags: str, cpus: set[int] | None = None, timeout: float = 300) -> Iterator[str]:
    """Base URL of a real server on loopback; `cpus` pins it (so a client on another CPU does not slow it)."""
    python = real_sglang.install()
    model = tiny_model.build(python)
    shim = tiny_model.shim(CACHE / "vllm-shim")
    port = free_port()
    # --max-total-tokens: without it the KV cache takes ~14 GB of RAM on CPU. --sleep-on-idle: without it the
    # scheduler polls for requests without a pause, a core taken from the other worker while the server waits.
    argv = [
        str(python),
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        "--device",
        "cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-total-tokens",
        "65536",
        "--sleep-on-idle",
        *flags,
    ]
    env = {**os.environ, "PYTHONPATH": str(shim)}
    with open(log, "w") as out:
        server = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=functools.partial(_before_exec, cpus),
        )
    url = f"http://127.0.0.1:{port}"
    try:
        status = wait_http(url + "/health_generate", timeout, server)
        if status != 200:
            raise RuntimeError(f"the real server did not become healthy (last status {status}); see {log}")
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()


def vocab_size(python: Path) -> int:
    return int(json.loads((tiny_model.build(python) / "config.json").read_text())["vocab_size"])
