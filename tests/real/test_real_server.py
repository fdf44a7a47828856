"""Our benchmark against the REAL sglang server on CPU (tiny model): consistent with the server's own counts."""

from __future__ import annotations

import contextlib
import json
import re
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from tests.rehearsal import real_server
from tests.rehearsal.bench import benchmarks

OUTPUT_TOKENS = 32


def generated_total(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(float(v) for v in re.findall(r"^sglang:generation_tokens_total(?:\{[^}]*\})?\s+([0-9.eE+-]+)$", text, re.M))


@pytest.fixture(scope="module")
def real_server_with(real_python, tmp_path_factory) -> Iterator[Callable[[tuple[str, ...]], str]]:
    """The URL of a real server launched with these flags: one at a time, kept while the next test asks for the
    same flags (a launch on CPU takes half a minute; the tests count tokens by differences, before and after)."""
    with contextlib.ExitStack() as serving:
        current: dict[tuple[str, ...], str] = {}

        def server(flags: tuple[str, ...]) -> str:
            if flags not in current:
                serving.close()
                current.clear()
                log = tmp_path_factory.mktemp("real-server") / "server.log"
                current[flags] = serving.enter_context(real_server.running(log, "--enable-metrics", *flags))
            return current[flags]

        yield server


@pytest.mark.parametrize(
    ("endpoint", "flags"),
    [("chat", ()), ("generate", ()), ("chat", ("--stream-interval", "4"))],
    ids=["chat", "generate", "chat-4-tokens-per-delta"],
)
def test_our_benchmark_agrees_with_the_real_servers_counts(real_python, real_server_with, tmp_path, endpoint, flags):
    url = real_server_with(flags)
    before = generated_total(url)
    done = benchmarks(
        "run",
        "--url",
        url,
        "--endpoint",
        endpoint,
        "--levels",
        "1,4",
        "--output-tokens",
        str(OUTPUT_TOKENS),
        "--input-tokens",
        "16",
        "--min-requests",
        "8",
        "--rounds",
        "2",
        "--vocab-size",
        str(real_server.vocab_size(real_python)),
        "--layout",
        "cpu-tp1",
        "--results-dir",
        str(tmp_path / "r"),
        "--metrics-interval",
        "0.2",
        timeout=900,
    )
    after = generated_total(url)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "r").rglob("*.json")
    run = json.loads(path.read_text())
    assert run["status"] == "complete" and run["server"]["sglang_version"] == "0.5.23"
    measured_tokens = 0
    for level in run["levels"]:
        assert level["completed"] == level["requests"] == max(8, 2 * level["concurrency"]) and level["failed"] == 0
        # ignore_eos: every request decoded exactly what was asked, by the server's own count.
        assert level["length_mismatches"] == 0
        assert level["output_tokens"] == level["completed"] * OUTPUT_TOKENS
        # Every chunk's exact token count: /generate's cumulative meta_info; on chat, the cumulative
        # usage SGLang puts on every chunk when asked for continuous_usage_stats (deltas carry several
        # tokens with --stream-interval, and when the detokenizer holds back a split character).
        assert level["stream_count_mismatches"] == 0
        source = "meta_info" if endpoint == "generate" else "continuous_usage"
        assert level["count_sources"] == {source: level["completed"]}
        assert level["decode_tok_s"]["p50"] > 0 and level["itl_ms"]["p50"] > 0
        measured_tokens += level["output_tokens"]
    # The server's own counter covers our measured requests plus warm-up, cool-down and health checks.
    generated = after - before
    assert measured_tokens <= generated <= 3 * measured_tokens + 10, (measured_tokens, generated)
