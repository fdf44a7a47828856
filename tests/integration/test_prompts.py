"""Dataset prompts and shared prefixes reach the server as written, through `python -m benchmarks run`."""

from __future__ import annotations

import json

from tests.rehearsal.bench import benchmarks
from tests.rehearsal.standin import emitted, serving_locally

FAST = ["--min-requests", "6", "--rounds", "1", "--warmup", "0", "--metrics-interval", "0"]


def seen_prompts(url: str) -> list[str]:
    return emitted(url)["prompts"]


def stored_level(results) -> dict:
    (path,) = results.rglob("*.json")
    run = json.loads(path.read_text())
    assert run["status"] == "complete", run.get("error")
    (level,) = run["levels"]
    return level


def test_a_json_lines_dataset_is_sent_with_its_output_lengths(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"question number {i}", "output_len": 5 + i}) + "\n" for i in range(3)))
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 2.0}) as url:
        results = ["--results-dir", str(tmp_path / "r")]
        done = benchmarks("run", "--url", url, "--levels", "2", "--dataset", str(data), *FAST, *results)
        assert done.returncode == 0, done.stdout + done.stderr
        prompts = seen_prompts(url)
    # 6 measured, and at C=2 perhaps one more sent while the last measured one finished.
    assert sorted(set(prompts)) == [f"question number {i}" for i in range(3)] and len(prompts) in (6, 7)
    level = stored_level(tmp_path / "r")
    # Every output length from the file, each asked and delivered (no length mismatch).
    assert level["length_mismatches"] == 0 and level["output_len"]["mean"] == 6.0 and level["completed"] == 6


def test_shared_prefixes_reach_the_server_once_per_group(tmp_path):
    with serving_locally(tmp_path, load_seconds=0.1, itl_ms={"default": 2.0}) as url:
        done = benchmarks(
            "run",
            "--url",
            url,
            "--endpoint",
            "generate",
            "--levels",
            "1",
            "--prefix-groups",
            "2",
            "--prefix-tokens",
            "32",
            "--input-tokens",
            "4",
            "--output-tokens",
            "4",
            *FAST,
            "--results-dir",
            str(tmp_path / "r"),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        prompts = [p.split() for p in seen_prompts(url)]
    assert len(prompts) == 6 and all(len(p) == 36 for p in prompts)
    assert len({tuple(p[:32]) for p in prompts}) == 2 and len({tuple(p) for p in prompts}) == 6
    assert stored_level(tmp_path / "r")["input_tokens"] == 6 * 36  # the server's own prompt count
