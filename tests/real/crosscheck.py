"""Cross-check with SGLang's own benchmark: `python -m tests.real.crosscheck` (not a test; a few minutes: three rounds).

The real server on CPU (tiny model) pinned to the first CPU; our benchmark and `python -m
sglang.bench_serving` pinned to the second, alternating, on the same workload: native /generate, 32
random input token ids, 64 output tokens with ignore_eos, 16 measured requests after 4 warm-up ones,
at concurrency 1 and 4. Prints each run and the ratios ours / bench_serving of output throughput and
median ITL.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.rehearsal import real_server, real_sglang, tiny_model
from tests.rehearsal.bench import benchmarks_argv, tool_env
from tests.rehearsal.playbook import REPO

LEVELS = (1, 4)
ROUNDS = 3


def pinned(cpu: int) -> list[str]:
    cpus = sorted(os.sched_getaffinity(0))
    return ["taskset", "-c", str(cpus[cpu % len(cpus)])]


def ours(url: str, vocab: int, results: Path) -> dict[int, tuple[float, float]]:
    argv = [
        *pinned(1),
        *benchmarks_argv(
            "run",
            "--url",
            url,
            "--endpoint",
            "generate",
            "--vocab-size",
            str(vocab),
            "--levels",
            ",".join(map(str, LEVELS)),
            "--output-tokens",
            "64",
            "--input-tokens",
            "32",
            "--min-requests",
            "16",
            "--rounds",
            "1",
            "--warmup",
            "4",
            "--layout",
            "cpu-tp1",
            "--results-dir",
            str(results),
        ),
    ]
    subprocess.run(argv, cwd=REPO, env=tool_env(), capture_output=True, check=True, timeout=900)
    newest = max(results.rglob("*.json"), key=lambda p: p.stat().st_mtime)
    run = json.loads(newest.read_text())
    return {lv["concurrency"]: (lv["bench_serving"]["output_throughput"], lv["itl_ms"]["p50"]) for lv in run["levels"]}


def bench_serving(python: Path, url: str, model: Path, concurrency: int) -> tuple[float, float]:
    argv = [
        *pinned(1),
        str(python),
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--base-url",
        url,
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        "32",
        "--random-output-len",
        "64",
        "--random-range-ratio",
        "1",
        "--num-prompts",
        "16",
        "--max-concurrency",
        str(concurrency),
        "--tokenizer",
        str(model),
        "--model",
        str(model),
        "--seed",
        "0",
        "--warmup-requests",
        "4",
    ]
    with tempfile.TemporaryDirectory() as scratch:  # bench_serving also writes a .jsonl of its own
        argv += ["--output-file", str(Path(scratch) / "bench_serving.jsonl")]
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=900, cwd=scratch).stdout
    throughput = float(re.search(r"Output token throughput \(tok/s\):\s+([0-9.]+)", out).group(1))
    itl = float(re.search(r"Median ITL \(ms\):\s+([0-9.]+)", out).group(1))
    return throughput, itl


def main() -> int:
    python = real_sglang.install()
    model = tiny_model.build(python)
    vocab = real_server.vocab_size(python)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cpus = {sorted(os.sched_getaffinity(0))[0]}
        with real_server.running(Path(tmp) / "server.log", cpus=cpus) as url:
            for round_ in range(ROUNDS):
                mine = ours(url, vocab, Path(tmp) / "results")
                for concurrency in LEVELS:
                    theirs = bench_serving(python, url, model, concurrency)
                    rows.append((round_ + 1, concurrency, *mine[concurrency], *theirs))
                    print(
                        f"round {round_ + 1} C={concurrency}: ours {mine[concurrency][0]:.1f} tok/s, ITL p50 "
                        f"{mine[concurrency][1]:.2f} ms; bench_serving {theirs[0]:.1f} tok/s, median ITL {theirs[1]:.2f} ms",
                        flush=True,
                    )
    print("\nC  output_throughput ours/bench_serving  median ITL ours/bench_serving")
    for concurrency in LEVELS:
        picked = [row for row in rows if row[1] == concurrency]
        throughput = [row[2] / row[4] for row in picked]
        itl = [row[3] / row[5] for row in picked]
        print(
            f"{concurrency}  {min(throughput):.2f}-{max(throughput):.2f} (mean {sum(throughput) / len(throughput):.2f})"
            f"                 {min(itl):.2f}-{max(itl):.2f} (mean {sum(itl) / len(itl):.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
