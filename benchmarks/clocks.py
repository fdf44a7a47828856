"""Records from several load-generator hosts on one clock.

Locust writes each request's times with its host's CLOCK_MONOTONIC (steady, but with a zero of its own
on every machine) and, once per process, a pair read together: wall-clock time and monotonic time. The
difference is that host's offset; shifting each host's times by its offset less the first host's puts
every record on the first host's clock, as well as the hosts' wall clocks agree (NTP: a millisecond or
so). Per-request figures (TTFT, inter-token times) never cross hosts and are not changed at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

# The fields that hold a point in time (everything else is a duration, a count or a label).
REQUEST_TIMES = ("sent", "planned", "end")


def offset(lines: Sequence[dict[str, Any]]) -> float | None:
    """wall - monotonic for the host that wrote these lines (the median of its processes' pairs)."""
    pairs = [line["wall"] - line["monotonic"] for line in lines if line.get("type") == "clock"]
    return statistics.median(pairs) if pairs else None


def shifted(line: dict[str, Any], by: float) -> dict[str, Any]:
    """One line with its points in time moved by `by` seconds."""
    if by == 0.0:
        return line
    kind = line.get("type", "request")
    if kind == "request":
        moved = {key: line[key] + by for key in REQUEST_TIMES if isinstance(line.get(key), (int, float))}
        return {**line, **moved, "chunk_times": [t + by for t in line.get("chunk_times", [])]}
    if kind == "metrics" and "time" in line:
        return {**line, "time": line["time"] + by}
    return line


def on_one_clock(hosts: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every host's lines, on the first host's clock. A host without a clock pair is taken as on it already."""
    offsets = [offset(lines) for lines in hosts]
    reference = next((value for value in offsets if value is not None), 0.0)
    merged: list[dict[str, Any]] = []
    for lines, value in zip(hosts, offsets, strict=True):
        by = 0.0 if value is None else value - reference
        merged += [shifted(line, by) for line in lines]
    return merged
