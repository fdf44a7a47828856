"""`run --slo`: levels go up until the SLO breaks, then the capacity is bisected, against a known queue.

The stand-in runs at most 4 requests at once (the rest queue). With a 20 ms prefill and 59 more tokens
5 ms apart, a request holds its slot D = 315 ms. Up to C = 4 closed-loop users every request starts at
once (TTFT ~20 ms); from C = 5 some request always waits for a slot, a full D when the users fall into
step (TTFT ~335 ms), D/4 at best (TTFT ~100 ms): at TTFT p99 <= 50 ms the capacity is exactly 4. The
bound sits 30 ms above the prefill, so a loaded machine's late wake-ups do not break a level below 5.
"""

from __future__ import annotations

import json

import pytest

from tests.rehearsal.bench import benchmarks
from tests.rehearsal.standin import serving_locally


@pytest.mark.alone  # TTFT held to the stand-in's queue (tests/alone.py)
def test_the_slo_capacity_is_bisected_to_the_queues_truth(tmp_path):
    simulation = {"load_seconds": 0.1, "itl_ms": {"default": 5.0}, "prefill_ms": 20.0, "max_running_requests": 4}
    with serving_locally(tmp_path, **simulation) as url:
        done = benchmarks(
            "run",
            *("--url", url, "--endpoint", "generate", "--levels", "1,2,16", "--slo", "ttft_p99=50"),
            *("--output-tokens", "60", "--input-tokens", "8", "--min-requests", "8", "--rounds", "2"),
            *("--metrics-interval", "0", "--results-dir", str(tmp_path / "r")),
            timeout=600,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "r").rglob("*.json")
    run = json.loads(path.read_text())
    # 16 broke it; bisection went 9 (broke), 5 (broke), 3 (met), 4 (met): the bracket is one request wide.
    assert [level["concurrency"] for level in run["levels"]] == [1, 2, 3, 4, 5, 9, 16]
    assert run["slo"]["bracket"] == [4, 5]
    assert "SLO capacity (ttft_p99 <= 50 ms): 4 in flight (met), 5 in flight broke it" in done.stdout
    ttft_p99 = {level["concurrency"]: level["ttft_ms"]["p99"] for level in run["levels"]}
    assert ttft_p99[4] < 50 and ttft_p99[5] > 80  # ~20 ms; at least prefill + D/4
