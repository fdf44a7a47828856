"""Realistic prompts: a local dataset file (ShareGPT or JSON lines) and the shared-prefix workload."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import cli, dataset
from benchmarks.workload import Workload


def sharegpt(tmp_path, items) -> object:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(items))
    return path


def test_sharegpt_gives_each_conversations_first_human_turn(tmp_path):
    path = sharegpt(
        tmp_path,
        [
            {"id": "a", "conversations": [{"from": "human", "value": "Why is the sky blue?"}, {"from": "gpt", "value": "..."}]},
            {"id": "b", "conversations": [{"from": "gpt", "value": "only a reply"}]},  # no human turn: skipped
            {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "Name a prime."}]},
            {"id": "d"},
        ],
    )
    assert dataset.load_prompts(path) == [dataset.Prompt("Why is the sky blue?"), dataset.Prompt("Name a prime.")]


def test_json_lines_carry_their_output_lengths(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "one", "output_len": 5}\n\n{"prompt": "two"}\n')
    assert dataset.load_prompts(path) == [dataset.Prompt("one", 5), dataset.Prompt("two", None)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"prompt": ""}\n', "line 2: 'prompt' must be non-empty text"),
        ('{"prompt": "ok", "output_len": 0}\n', "line 1: 'output_len' 0 must be a whole number from 1"),
        ('{"prompt": "ok", "output_len": true}\n', "line 1: 'output_len' True must be a whole number"),
        ("prompt: yaml\n", "line 1: not a JSON object"),
        ('["a", "b"]', "no usable prompt in it"),
        ("[1, 2", "not valid JSON"),
    ],
)
def test_a_malformed_dataset_is_refused_with_the_place_and_the_fix(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(dataset.DatasetError, match=r"--dataset .*bad\.jsonl") as caught:
        dataset.load_prompts(path)
    assert message in str(caught.value)


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_only_a_regular_file_is_read_as_a_dataset(tmp_path, kind):
    """/dev/zero would be read until the kernel kills the process; a FIFO would wait for a writer for ever."""
    path = {"device": Path("/dev/zero"), "fifo": tmp_path / "fifo", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(dataset.DatasetError, match="not a regular file"):
        dataset.load_prompts(path)


def test_a_dataset_over_the_bound_is_refused_without_reading_it_all(tmp_path, monkeypatch):
    path = tmp_path / "big.jsonl"
    path.write_text('{"prompt": "ok"}\n' * 100)
    monkeypatch.setattr(dataset, "MAX_BYTES", 64)
    with pytest.raises(dataset.DatasetError, match="take a sample"):
        dataset.load_prompts(path)


def test_a_missing_dataset_stops_the_run_before_anything_is_sent(tmp_path, capsys):
    missing = tmp_path / "nowhere.jsonl"
    assert cli.main(["run", "--url", "http://127.0.0.1:1", "--dataset", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and str(missing) in err and not list(tmp_path.glob("results"))


def options(**overrides) -> SimpleNamespace:
    base = {
        "bench_seed": 0,
        "bench_endpoint": "chat",
        "bench_model": "default",
        "bench_input_tokens": 4,
        "bench_output_tokens": 16,
        "bench_range_ratio": 1.0,
        "bench_vocab_size": 32000,
        "bench_prompts": "",
        "bench_prefix_groups": 0,
        "bench_prefix_tokens": 0,
    }
    return SimpleNamespace(**{**base, **overrides})


def sent(locustfile, opts, index) -> tuple[dict, int]:
    _, body, n_out = locustfile.request_body(opts, index)
    return json.loads(body), n_out


def test_dataset_prompts_go_in_a_seeded_order_with_their_lengths(locustfile, tmp_path, monkeypatch):
    monkeypatch.setattr(locustfile, "PROMPTS", [])
    prompts = [dataset.Prompt(f"prompt {i}", i + 1 if i % 2 else None) for i in range(6)]
    path = dataset.write_prompts(prompts, tmp_path / "p.jsonl")
    opts = options(bench_prompts=str(path), bench_seed=3)
    first = [sent(locustfile, opts, i) for i in range(12)]
    texts = [body["messages"][0]["content"] for body, _ in first]
    assert sorted(texts[:6]) == [f"prompt {i}" for i in range(6)] and texts[6:] == texts[:6]  # each once, then again
    assert texts[:6] != [f"prompt {i}" for i in range(6)]  # shuffled by the seed
    for body, n_out in first:
        index = int(body["messages"][0]["content"].split()[1])
        assert n_out == body["max_tokens"] == (index + 1 if index % 2 else 16)
    monkeypatch.setattr(locustfile, "PROMPTS", [])
    generate = options(bench_prompts=str(path), bench_seed=3, bench_endpoint="generate")
    body, _ = sent(locustfile, generate, 0)
    assert body["text"] == texts[0] and "input_ids" not in body


@pytest.mark.parametrize("endpoint", ["chat", "generate"])
def test_shared_prefixes_repeat_per_group_and_differ_between_groups(locustfile, endpoint):
    opts = options(bench_endpoint=endpoint, bench_prefix_groups=3, bench_prefix_tokens=20)

    def prompt(index):
        body, _ = sent(locustfile, opts, index)
        return body["messages"][0]["content"].split() if endpoint == "chat" else body["input_ids"]

    prompts = [prompt(i) for i in range(6)]
    assert all(len(p) == 24 for p in prompts)  # 20 shared + 4 of the request's own
    assert prompts[0][:20] == prompts[3][:20] and prompts[1][:20] == prompts[4][:20]
    assert len({tuple(p[:20]) for p in prompts}) == 3
    assert prompts[0][20:] != prompts[3][20:]  # the rest is each request's own


def test_prefix_options_need_each_other_and_not_a_dataset():
    assert Workload(levels=[1], prefix_groups=4).problems() == [
        "a shared-prefix workload needs both --prefix-groups G and --prefix-tokens P (both above 0)"
    ]
    assert Workload(levels=[1], prefix_groups=4, prefix_tokens=64).problems() == []
    assert "drop it or --dataset" in Workload(levels=[1], prefix_groups=4, prefix_tokens=64, dataset="x").problems()[0]
