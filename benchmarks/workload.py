"""The workload of a sweep: what is sent at each level and how many requests are measured.

A level is either closed-loop (C users, each sending its next request when its last one ends: `--levels`)
or open-loop (requests arriving at a rate whether or not the server keeps up: `--request-rates`).

Defined once: the dataclass holds the fields, `add_cli_args` writes the command-line options of every
subcommand that sends load (run, search), `from_cli_args` reads them back.
"""

from __future__ import annotations

import argparse
import math
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


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """`4h`, `90m`, `300s` or `300` (seconds) -> seconds; an argparse type."""
    spoken = text.strip().lower()
    unit = _UNITS.get(spoken[-1:])
    number = spoken[:-1] if unit else spoken
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: write e.g. 4h, 90m or 300s") from exc
    if not 0 < seconds <= 30 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 and at most 30 days")
    return seconds


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",")]  # "1,,2" is a typo, not 1,2
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--levels {text!r}: give whole numbers separated by commas, e.g. 1,16,64") from exc
    if not levels or any(not 1 <= level <= 100_000 for level in levels):
        raise argparse.ArgumentTypeError(f"--levels {text!r}: every concurrency must be from 1 to 100000")
    return levels


def parse_rates(text: str) -> list[float]:
    """`0.5,2,8` -> [0.5, 2.0, 8.0] requests per second, each once, in the order given."""
    try:
        rates = [float(part) for part in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"--request-rates {text!r}: give numbers of requests per second separated by commas, e.g. 0.5,2,8"
        ) from exc
    if not rates or any(not 0.001 <= rate <= 100_000 or math.isnan(rate) for rate in rates):
        raise argparse.ArgumentTypeError(f"--request-rates {text!r}: every rate must be from 0.001 to 100000 requests/s")
    return list(dict.fromkeys(rates))


def rate_key(rate: float) -> str:
    """An open-loop level's name in files and tables: r2 for 2 requests/s, r0.5 for 0.5."""
    return f"r{rate:g}"


def level_name(level: dict[str, Any]) -> str:
    """How a stored level is named in tables: C=16, or R=2/s for an open-loop level."""
    arrival = level.get("arrival")
    if arrival:
        cap = f", C<={arrival['max_concurrency']}" if arrival.get("max_concurrency") else ""
        return f"R={arrival['target_rate']:g}/s{cap}"
    return f"C={level['concurrency']}"


def level_load(level: dict[str, Any]) -> float:
    """A stored level's load on one axis: its concurrency, or its target rate (open loop)."""
    arrival = level.get("arrival")
    return float(arrival["target_rate"]) if arrival else float(level["concurrency"])


def level_id(level: dict[str, Any]) -> str:
    """The key that matches one level across runs and repeats: its concurrency, or r<rate>."""
    arrival = level.get("arrival")
    return rate_key(arrival["target_rate"]) if arrival else str(level["concurrency"])


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


def field_default(name: str) -> Any:
    """A Workload field's default, for the option that sets it (so each default is written once, on the field)."""
    declared = Workload.__dataclass_fields__[name]
    return declared.default_factory() if callable(declared.default_factory) else declared.default


# `run`'s and `search`'s workload options after --levels and --request-rates: each sets the Workload field
# of its name (dashes for underscores) and defaults to it. To add one: a field, then a row here.
_FIELD_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "--burstiness",
        {
            "type": bounded(0.01, 100.0, kind=float),
            "help": "open loop: gamma inter-arrivals of this shape (1: Poisson; below 1 burstier, above 1 steadier; "
            "vLLM's meaning)",
        },
    ),
    (
        "--max-concurrency",
        {
            "type": bounded(0, 100_000),
            "help": "open loop: at most this many requests in flight; a request due while all are busy waits (0: no cap)",
        },
    ),
    ("--endpoint", {"choices": ["chat", "generate"]}),
    ("--model", {"help": "model name sent to the OpenAI endpoint"}),
    ("--input-tokens", {"type": bounded(1, 1_000_000)}),
    ("--output-tokens", {"type": bounded(1, 1_000_000)}),
    (
        "--range-ratio",
        {
            "type": bounded(0.0, 1.0, kind=float),
            "help": "input and output lengths uniform in [target x ratio, target] per request, seeded (bench_serving's "
            "--random-range-ratio; default 1: fixed lengths)",
        },
    ),
    ("--seed", {"type": bounded(0, 2**31 - 1)}),
    (
        "--vocab-size",
        {
            "type": bounded(32, 100_000_000),
            "help": "--endpoint generate: prompt token ids are drawn below this; set the model's vocab_size",
        },
    ),
    ("--warmup", {"type": bounded(-1, 1_000_000), "help": "requests excluded first (default -1: one per user)"}),
    ("--rounds", {"type": bounded(1, 10_000), "help": "measured requests per level = max(--min-requests, rounds x C)"}),
    ("--min-requests", {"type": bounded(1, 1_000_000)}),
    ("--level-timeout", {"type": bounded(1, 86_400), "help": "seconds a level may run at most"}),
    (
        "--stall-timeout",
        {
            "type": bounded(1, 86_400, kind=float),
            "help": "seconds without a token on any open stream before the level ends as a hang (a verdict, not a"
            " wait for every request's timeout; NCCL peer-to-peer can hang so on PCIe boxes)",
        },
    ),
    ("--metrics-interval", {"type": bounded(0, 3600, kind=float), "help": "seconds between /metrics samples (0: off)"}),
    (
        "--gpu-interval",
        {
            "type": bounded(0, 3600),
            "help": "seconds between samples of the server host's GPUs (nvidia-smi dmon) during each level (0: off); "
            "with --server-host only",
        },
    ),
    ("--processes", {"type": bounded(1, 256), "help": "load-generator processes (Locust --processes)"}),
    (
        "--repeats",
        {
            "type": bounded(1, 100),
            "help": "measure each level N times: every headline figure as the mean with a 95%% interval, and a "
            "layout called better only when the intervals separate",
        },
    ),
    (
        "--dataset",
        {
            "metavar": "FILE",
            "help": 'prompts from a local file: ShareGPT JSON, or JSON lines {"prompt": ..., "output_len": N} '
            "(output_len optional; never downloaded); used in a seeded order",
        },
    ),
    (
        "--prefix-groups",
        {
            "type": bounded(0, 1_000_000),
            "help": "shared-prefix workload: request i starts with group i mod G's prefix (with --prefix-tokens)",
        },
    ),
    ("--prefix-tokens", {"type": bounded(0, 1_000_000), "help": "the length of each group's shared prefix"}),
    (
        "--flush-cache",
        {"action": "store_true", "help": "empty the server's prefix cache (SGLang /flush_cache) before each level"},
    ),
    (
        "--goodput",
        {
            "type": parse_goodput,
            "nargs": "+",
            "action": _Pairs,
            "metavar": "KEY:MS",
            "help": "request-level bounds (ttft, tpot, e2el in ms, e.g. ttft:2000 tpot:50): each level also reports the "
            "good requests per second, good tok/s and good fraction",
        },
    ),
)


@dataclass
class Workload:
    levels: list[int]  # closed loop: the concurrencies (ignored when request_rates are given)
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
    # Seconds without a token from the server, on any of the level's open streams, before the level is a hang.
    stall_timeout: float = 60.0
    gpu_interval: int = 1  # seconds between nvidia-smi dmon samples on the server host (0: off; --server-host only)
    flush_cache: bool = False  # SGLang's /flush_cache before each level
    repeats: int = 1  # each level measured this many times; figures as means with 95% intervals
    processes: int = 1  # Locust --processes: load-generator cores (more than ~128 fast streams per core)
    goodput: dict[str, float] = field(default_factory=dict)  # bounds in ms: a request is good within all of them
    # Open loop: one level per rate (requests/s), gamma inter-arrivals of shape `burstiness` (1: Poisson),
    # at most `max_concurrency` in flight (0: no cap; a request due while the cap is full waits for a slot).
    request_rates: list[float] = field(default_factory=list)
    burstiness: float = 1.0
    max_concurrency: int = 0
    # Prompts: synthetic (seeded words or token ids), from a local dataset file, or with a prefix shared
    # by each of `prefix_groups` groups of requests (`prefix_tokens` long), so the radix cache is used.
    dataset: str = ""
    prefix_groups: int = 0
    prefix_tokens: int = 0

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser, *, default_levels: str = DEFAULT_LEVELS) -> None:
        """The workload's options, one per field (the field's name with dashes), each defaulting to its field."""
        load = parser.add_mutually_exclusive_group()
        load.add_argument(
            "--levels",
            type=parse_levels,
            default=parse_levels(default_levels),
            help=f"closed loop: the concurrencies, one level each (default {default_levels})",
        )
        load.add_argument(
            "--request-rates",
            type=parse_rates,
            default=[],
            help="open loop instead: requests per second, one level each (e.g. 1,4,16); requests arrive on a seeded "
            "schedule whether or not earlier ones returned",
        )
        for option, spec in _FIELD_OPTIONS:
            parser.add_argument(option, default=field_default(option.removeprefix("--").replace("-", "_")), **spec)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> Workload:
        return cls(**{item.name: getattr(args, item.name) for item in fields(cls)})

    @property
    def open_loop(self) -> bool:
        return bool(self.request_rates)

    def level_keys(self) -> list[str]:
        """Every level's name in files: its concurrency (closed loop) or r<rate> (open loop), in order."""
        return [rate_key(rate) for rate in self.request_rates] if self.open_loop else [str(c) for c in self.levels]

    def rate_of(self, key: str | int) -> float | None:
        """An open-loop level's rate (requests/s); None for a closed-loop level."""
        return next((rate for rate in self.request_rates if rate_key(rate) == str(key)), None)

    def measured_requests(self, key: str | int) -> int:
        """Closed loop: max(min_requests, rounds x C); open loop: max(min_requests, rounds seconds of arrivals)."""
        rate = self.rate_of(key)
        return max(self.min_requests, self.rounds * int(key) if rate is None else math.ceil(self.rounds * rate))

    def warmup_requests(self, key: str | int) -> int:
        """Requests excluded first: as given, or (-1) one per user in closed loop, one second of arrivals in open loop."""
        if self.warmup >= 0:
            return self.warmup
        rate = self.rate_of(key)
        return int(key) if rate is None else max(1, math.ceil(rate))

    def users(self, key: str | int) -> int:
        """Locust users: C in closed loop; in open loop one scheduler per load-generator process."""
        return self.processes if self.rate_of(key) is not None else int(key)

    def problems(self) -> list[str]:
        """Option combinations that cannot work, each said with the fix (before anything runs)."""
        found = []
        if not self.open_loop and (self.burstiness != 1.0 or self.max_concurrency):
            found.append("--burstiness and --max-concurrency shape open-loop levels: give --request-rates too")
        if bool(self.prefix_groups) != bool(self.prefix_tokens):
            found.append("a shared-prefix workload needs both --prefix-groups G and --prefix-tokens P (both above 0)")
        if self.dataset and self.prefix_groups:
            found.append("--prefix-groups shapes synthetic prompts: drop it or --dataset")
        return found

    def arrival(self, key: str | int) -> dict[str, Any] | None:
        """What an open-loop level asked for (stored with its figures); None in closed loop."""
        rate = self.rate_of(key)
        if rate is None:
            return None
        return {"target_rate": rate, "burstiness": self.burstiness, "max_concurrency": self.max_concurrency}

    def at_levels(self, levels: list[int]) -> Workload:
        """The same workload over other concurrencies (closed loop)."""
        return type(self)(**{**vars(self), "levels": list(levels), "goodput": dict(self.goodput), "request_rates": []})

    def at_load(self, load: float) -> Workload:
        """The same workload at one level: a request rate in open loop, else a concurrency."""
        return self.at_loads([load])

    def at_loads(self, loads: list[float]) -> Workload:
        """The same workload at these levels, in this order: request rates in open loop, else concurrencies."""
        if self.open_loop:
            return type(self)(**{**vars(self), "goodput": dict(self.goodput), "request_rates": [float(x) for x in loads]})
        return self.at_levels([int(x) for x in loads])

    # The fields the locustfile reads as --bench-<field> options, the same at every level.
    LOCUST_FIELDS = (
        "endpoint",
        "model",
        "input_tokens",
        "output_tokens",
        "range_ratio",
        "seed",
        "vocab_size",
        "burstiness",
        "max_concurrency",
        "prefix_groups",
        "prefix_tokens",
        "metrics_interval",
        "stall_timeout",
    )

    def locust_options(self) -> list[str]:
        """The workload as the locustfile's options (--bench-input-tokens=128 ...): rendered here only, and
        used as they are by playbooks/tasks/benchmark_level.yml and the load-generator harness."""
        return [f"--bench-{name.replace('_', '-')}={getattr(self, name)}" for name in self.LOCUST_FIELDS]

    def extravars(self) -> dict[str, Any]:
        keys = self.level_keys()
        return {
            "bench_levels": keys if self.open_loop else self.levels,
            "bench_locust_options": self.locust_options(),
            "bench_warmup": {key: self.warmup_requests(key) for key in keys},
            "bench_measured": {key: self.measured_requests(key) for key in keys},
            "bench_users": {key: self.users(key) for key in keys},
            "bench_rates": {key: self.rate_of(key) for key in keys if self.open_loop},
            "bench_level_timeout": self.level_timeout,
            "bench_processes": self.processes,
            "bench_flush_cache": self.flush_cache,
            "bench_gpu_interval": self.gpu_interval,
        }
