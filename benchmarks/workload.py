"""The workload of a sweep: what is sent at each concurrency level and how many requests are measured.

Defined once: the dataclass holds the fields, `add_cli_args` writes the command-line options of every
subcommand that sends load (run, search), `from_cli_args` reads them back.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from benchmarks.metrics import GOODPUT_METRICS

DEFAULT_LEVELS = "1,2,4,8,16,32,64,128,256"


def bounded(low: float, high: float, *, kind: type = int) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` within [low, high], or a message naming the bounds."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from exc
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be from {low} to {high}")
        return value

    return parse


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--levels {text!r}: give whole numbers separated by commas, e.g. 1,16,64") from exc
    if not levels or any(not 1 <= level <= 100_000 for level in levels):
        raise argparse.ArgumentTypeError(f"--levels {text!r}: every concurrency must be from 1 to 100000")
    return levels


def parse_goodput(text: str) -> tuple[str, float]:
    """`tpot:50` -> ('tpot', 50.0): vLLM's --goodput spelling, milliseconds."""
    name, sep, value = text.partition(":")
    try:
        limit = float(value)
    except ValueError:
        limit = -1.0
    if not sep or name not in GOODPUT_METRICS or not 0 < limit <= 86_400_000:
        raise argparse.ArgumentTypeError(
            f"--goodput {text!r}: write KEY:MS with KEY one of {', '.join(GOODPUT_METRICS)} and MS a positive number, "
            "e.g. --goodput ttft:2000 tpot:50"
        )
    return name, limit


class _Pairs(argparse.Action):
    """Collect KEY:MS pairs into a dict (a key given twice keeps its last value)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, {**(getattr(namespace, self.dest) or {}), **dict(values)})


@dataclass
class Workload:
    levels: list[int]
    endpoint: str = "chat"  # chat: /v1/chat/completions; generate: SGLang's native /generate
    model: str = "default"
    input_tokens: int = 128
    output_tokens: int = 256
    range_ratio: float = 1.0  # lengths uniform in [target x ratio, target] per request; 1: fixed
    seed: int = 0
    vocab_size: int = 32000  # /generate: token ids are drawn below it
    warmup: int = -1  # requests excluded first; -1: one per user
    rounds: int = 4  # measured requests = max(min_requests, rounds x C)
    min_requests: int = 16
    level_timeout: int = 600
    metrics_interval: float = 1.0
    flush_cache: bool = False  # SGLang's /flush_cache before each level
    repeats: int = 1  # each level measured this many times; figures as means with 95% intervals
    processes: int = 1  # Locust --processes: load-generator cores (more than ~128 fast streams per core)
    goodput: dict[str, float] = field(default_factory=dict)  # bounds in ms: a request is good within all of them

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser, *, default_levels: str = DEFAULT_LEVELS) -> None:
        """The workload's options, one per field (the field's name with dashes)."""
        add = parser.add_argument
        add("--levels", type=parse_levels, default=parse_levels(default_levels), help=f"concurrencies (default {default_levels})")
        add("--endpoint", choices=["chat", "generate"], default="chat")
        add("--model", default="default", help="model name sent to the OpenAI endpoint")
        add("--input-tokens", type=bounded(1, 1_000_000), default=128)
        add("--output-tokens", type=bounded(1, 1_000_000), default=256)
        add(
            "--range-ratio",
            type=bounded(0.0, 1.0, kind=float),
            default=1.0,
            help="input and output lengths uniform in [target x ratio, target] per request, seeded (bench_serving's "
            "--random-range-ratio; default 1: fixed lengths)",
        )
        add("--seed", type=bounded(0, 2**31 - 1), default=0)
        add(
            "--vocab-size",
            type=bounded(32, 100_000_000),
            default=32000,
            help="--endpoint generate: prompt token ids are drawn below this; set the model's vocab_size",
        )
        add("--warmup", type=bounded(-1, 1_000_000), default=-1, help="requests excluded first (default -1: one per user)")
        add("--rounds", type=bounded(1, 10_000), default=4, help="measured requests per level = max(--min-requests, rounds x C)")
        add("--min-requests", type=bounded(1, 1_000_000), default=16)
        add("--level-timeout", type=bounded(1, 86_400), default=600, help="seconds a level may run at most")
        add(
            "--metrics-interval", type=bounded(0, 3600, kind=float), default=1.0, help="seconds between /metrics samples (0: off)"
        )
        add("--processes", type=bounded(1, 256), default=1, help="load-generator processes (Locust --processes)")
        add(
            "--repeats",
            type=bounded(1, 100),
            default=1,
            help="measure each level N times: every headline figure as the mean with a 95%% interval, and a "
            "layout called better only when the intervals separate",
        )
        add("--flush-cache", action="store_true", help="empty the server's prefix cache (SGLang /flush_cache) before each level")
        add(
            "--goodput",
            type=parse_goodput,
            nargs="+",
            action=_Pairs,
            default={},
            metavar="KEY:MS",
            help="request-level bounds (ttft, tpot, e2el in ms, e.g. ttft:2000 tpot:50): each level also reports the "
            "good requests per second, good tok/s and good fraction",
        )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> Workload:
        return cls(**{item.name: getattr(args, item.name) for item in fields(cls)})

    def measured_requests(self, concurrency: int) -> int:
        return max(self.min_requests, self.rounds * concurrency)

    def warmup_requests(self, concurrency: int) -> int:
        """Requests excluded first: as given, or one per user (-1)."""
        return self.warmup if self.warmup >= 0 else concurrency

    def at_levels(self, levels: list[int]) -> Workload:
        """The same workload over other levels (the search measures one level at a time)."""
        return type(self)(**{**vars(self), "levels": list(levels), "goodput": dict(self.goodput)})

    def extravars(self) -> dict[str, Any]:
        return {
            "bench_levels": self.levels,
            "bench_endpoint": self.endpoint,
            "bench_model": self.model,
            "bench_input_tokens": self.input_tokens,
            "bench_output_tokens": self.output_tokens,
            "bench_range_ratio": self.range_ratio,
            "bench_seed": self.seed,
            "bench_vocab_size": self.vocab_size,
            "bench_warmup": {str(c): self.warmup_requests(c) for c in self.levels},
            "bench_measured": {str(c): self.measured_requests(c) for c in self.levels},
            "bench_level_timeout": self.level_timeout,
            "bench_metrics_interval": self.metrics_interval,
            "bench_processes": self.processes,
            "bench_flush_cache": self.flush_cache,
        }
