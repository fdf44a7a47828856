"""The STAND-IN sglang honours SGLang's rules and its own configured token rate (run locally on loopback)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

from tests.conftest import REPO
from tests.rehearsal.standin import local_server, stream_chat, wait_http

FAST = {"load_seconds": 0.4, "prefill_ms": 5}


def exited(process, timeout=20.0) -> int:
    return process.wait(timeout=timeout)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--cuda-graph-max-bs", "64"), "ambiguous option: --cuda-graph-max-bs could match"),
        (("--moe-a2a-backend", "bogus"), "invalid choice: 'bogus'"),
        (("--no-such-flag",), "unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_flags_exit_2_like_argparse(tmp_path, flags, words):
    with local_server(tmp_path, *flags, **FAST) as (process, _, log):
        assert exited(process) == 2
    assert words in log.read_text()


def test_tp2_ep4_dies_with_zero_division_after_serving_503(tmp_path):
    with local_server(tmp_path, "--tp-size", "2", "--ep-size", "4", load_seconds=2) as (process, url, log):
        assert wait_http(url + "/health", 1.0) == 503
        assert exited(process) != 0
    assert "ZeroDivisionError" in log.read_text()


def test_weights_that_do_not_fit_the_gpus_used_run_out_of_memory(tmp_path):
    sim = {**FAST, "gpu_count": 8, "gpu_memory_gib": 95, "weights_gib": 553}
    with local_server(tmp_path, "--tp-size", "4", "--ep-size", "2", "--mem-fraction-static", "0.88", **sim) as (process, _, log):
        assert exited(process) != 0
    assert "CUDA out of memory" in log.read_text()
    with local_server(tmp_path, "--tp-size", "8", "--ep-size", "8", "--mem-fraction-static", "0.88", **sim) as (process, url, _):
        assert wait_http(url + "/health_generate", 10, process) == 200


def test_missing_model_and_busy_port_fail(tmp_path):
    with local_server(tmp_path, **FAST) as (process, url, _):
        assert wait_http(url + "/health_generate", 10, process) == 200
        port = url.rsplit(":", 1)[1]
        with local_server(tmp_path / "second", "--port", port, **FAST) as (other, _, log):
            assert exited(other) != 0
        assert "address already in use" in log.read_text().lower()


def _post(url: str, body: dict, headers: dict | None = None) -> list[dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        lines = [line.decode().strip() for line in response]
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def test_api_key_guards_all_but_health_and_metrics(tmp_path):
    with local_server(tmp_path, "--api-key", "s3cret", "--enable-metrics", **FAST) as (process, url, _):
        assert wait_http(url + "/health_generate", 10, process) == 200
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(url + "/v1/models", timeout=5)
        assert denied.value.code == 401
        assert wait_http(url + "/metrics", 2) == 200
        body = {"text": "a b c", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}, "stream": True}
        chunks = _post(url + "/generate", body, {"Authorization": "Bearer s3cret"})
        assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 5]
        assert chunks[-1]["text"] == " tok" * 5 and chunks[-1]["meta_info"]["prompt_tokens"] == 3


def _decode_rate(url: str, tokens: int, results: list) -> None:
    completion_tokens, rate = stream_chat(url, tokens)
    results.append((rate, completion_tokens))


@pytest.mark.alone  # held to the stand-in's clock (tests/alone.py)
@pytest.mark.parametrize(("concurrency", "base_ms", "slope_ms"), [(1, 10.0, 0.0), (8, 10.0, 0.5)])
def test_token_rate_matches_the_setting(tmp_path, concurrency, base_ms, slope_ms):
    """Per-request decode rate = 1 / (base + slope x running), measured on the client."""
    sim = {**FAST, "itl_ms": {"default": base_ms}, "itl_slope_ms": slope_ms}
    with local_server(tmp_path, **sim) as (process, url, _):
        assert wait_http(url + "/ready", 10, process) == 200
        results: list = []
        threads = [threading.Thread(target=_decode_rate, args=(url, 150, results)) for _ in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    expected = 1000.0 / (base_ms + slope_ms * concurrency)
    assert len(results) == concurrency
    for rate, completion_tokens in results:
        assert completion_tokens == 150
        assert rate == pytest.approx(expected, rel=0.03)


@pytest.mark.alone  # held to the stand-in's clock (tests/alone.py)
def test_the_roofline_caps_aggregate_output(tmp_path):
    """8 requests at 10 ms under a 200 tok/s roofline: each decodes at 200 / 8 = 25 tok/s, not 100."""
    sim = {**FAST, "itl_ms": {"default": 10.0}, "peak_tok_s": {"default": 200.0}}
    with local_server(tmp_path, **sim) as (process, url, _):
        assert wait_http(url + "/ready", 10, process) == 200
        results: list = []
        threads = [threading.Thread(target=_decode_rate, args=(url, 60, results)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert len(results) == 8
    for rate, _ in results:
        assert rate == pytest.approx(25.0, rel=0.05)


def _first_token_after(url: str, tokens: int, waits: list) -> None:
    body = {"text": "hi", "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}, "stream": True}
    request = urllib.request.Request(
        url + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    sent = time.monotonic()
    with urllib.request.urlopen(request, timeout=60) as response:
        response.readline()
        waits.append(time.monotonic() - sent)
        response.read()


@pytest.mark.alone  # held to the stand-in's clock (tests/alone.py)
def test_requests_beyond_max_running_requests_queue(tmp_path):
    """--max-running-requests 2 with 4 requests of 50 tokens at 10 ms: two start at once, two wait ~0.5 s."""
    with local_server(tmp_path, "--max-running-requests", "2", **FAST, itl_ms={"default": 10.0}) as (process, url, _):
        assert wait_http(url + "/ready", 10, process) == 200
        waits: list = []
        threads = [threading.Thread(target=_first_token_after, args=(url, 50, waits)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    waits.sort()
    assert len(waits) == 4
    assert waits[1] < 0.2 and waits[2] > 0.45


HOLDERS = {
    # Each holds its server inside its context manager and writes "ready" there; killed, it never leaves it.
    "stand-in": "from tests.rehearsal.standin import local_server as serving\nholding = serving(Path(TMP))",
    "cuda-repo": "from tests.rehearsal.apt_repo import served as serving\nholding = serving(Path(TMP) / 'repo')",
}


@pytest.mark.parametrize("server", sorted(HOLDERS))
def test_a_server_dies_with_the_process_that_started_it(tmp_path, server):
    """A test process killed before its teardown (pytest-xdist kills a stopped worker after 10 s) leaves no
    server: the stand-in SGLang, and the CUDA apt repo's web server (a stopped CI run once left one)."""
    ready = tmp_path / "ready"
    script = (
        f"import time; from pathlib import Path; TMP = {str(tmp_path)!r}\n{HOLDERS[server]}\n"
        f"with holding:\n    Path({str(ready)!r}).write_text('ready'); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and holder.poll() is None:
            time.sleep(0.05)
        assert ready.exists(), f"the {server} never came up"
        (served,) = psutil.Process(holder.pid).children()
        holder.send_signal(signal.SIGKILL)  # no teardown at all
        holder.wait(timeout=10)
        gone, _ = psutil.wait_procs([served], timeout=10)
        assert gone or served.status() == psutil.STATUS_ZOMBIE, f"the {server} ({served.pid}) outlived its parent"
    finally:
        if holder.poll() is None:
            holder.kill()
