"""A test that test_stopping.py runs in a pytest of its own and stops with SIGTERM halfway: not collected here.

It holds what a real test holds (a rehearsal box, a stand-in server on loopback, a temporary directory)
and says where they are in the file named by STOPPED_RUN_READY, then waits to be stopped. Its teardown
takes STOPPED_RUN_TEARDOWN_S seconds before the box's, as a long one would.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from tests.rehearsal.standin import local_server


@pytest.fixture
def slow_to_tear_down(box):
    yield box
    time.sleep(float(os.environ.get("STOPPED_RUN_TEARDOWN_S", "0")))


def test_held_until_stopped(slow_to_tear_down):
    box = slow_to_tear_down
    with (
        tempfile.TemporaryDirectory(prefix="stopped-run-") as tmp,
        local_server(Path(tmp), load_seconds=0.1) as (server, _url, _),
    ):
        held = {"box": box.name, "nspawn": box.pid, "server": server.pid, "tmp": tmp, "pytest": os.getpid()}
        ready = Path(os.environ["STOPPED_RUN_READY"])
        ready.with_suffix(".tmp").write_text(json.dumps(held))
        ready.with_suffix(".tmp").rename(ready)  # whole when the other side sees it
        time.sleep(300)
