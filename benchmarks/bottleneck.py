"""What held a level back, named by plain rules from its figures, with the evidence. Pure.

The rules, first that holds wins (docs/benchmarks.md, "What held each level back"):
0. communication hang: the level ended because no token came with requests open (--stall-timeout); the
   known workarounds on PCIe boxes (FIELD-NOTES.md) are named, to add as search axes.
1. load generator: its busiest process used more than 70% of a core (levels.CLIENT_BOUND_CPU); the
   server's figures then say little, so this comes first.
2. KV cache full: SGLang's token usage peaked at 0.95 or more and it retracted requests.
3. scheduler cap: requests queued (1 or more on average) while the running ones stayed at the cap,
   `max-running-requests` when the server's arguments say it, else the most that ran (95% of it or more
   on average): the server would have taken more work but did not admit it.
4. PCIe: one GPU's receive plus transmit (its median over the level) reached 70% of its link both ways
   (the link's rate from the host's GPU record, PCIe generation and width, after line coding).
5. GPU compute: one GPU's SM busy (its median over the level) was 90% or more.
Otherwise "not identified", with the figures that ruled each out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks import gpu_telemetry
from benchmarks.levels import CLIENT_BOUND_CPU

KV_FULL_USAGE = 0.95
AT_CAP = 0.95
QUEUED = 1.0
PCIE_SHARE = 0.7
SM_BUSY = 90.0


def _figure(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@dataclass(frozen=True)
class Seen:
    """What one level shows, as the rules read it: the load generator, the server's /metrics, the GPUs."""

    loadgen: Mapping[str, Any]
    server: Mapping[str, Any]
    gpus: Mapping[str, Any] | None  # gpu_telemetry.headline
    link_mb_s: float | None  # the GPUs' PCIe link, one way
    running_cap: int | None  # max-running-requests, when the server's arguments say it

    @property
    def running(self) -> float | None:
        return self.server.get("num_running_reqs")

    @property
    def queued(self) -> float | None:
        return self.server.get("num_queue_reqs")


Verdict = dict[str, str]


def _load_generator(seen: Seen) -> Verdict | None:
    if not seen.loadgen.get("client_bound"):
        return None
    busiest = 100 * seen.loadgen["busiest_cpu_fraction"]
    return {
        "name": "load generator",
        "evidence": f"its busiest process used {busiest:.0f}% of a core (over {100 * CLIENT_BOUND_CPU:.0f}%): "
        "add --processes or load generators",
    }


def _kv_cache_full(seen: Seen) -> Verdict | None:
    peak_usage, retracted = seen.server.get("max_token_usage"), seen.server.get("retracted")
    if peak_usage is None or peak_usage < KV_FULL_USAGE or (retracted or 0) < 1:
        return None
    return {
        "name": "KV cache full",
        "evidence": f"token usage peaked at {peak_usage:.2f} and {retracted:.0f} requests were retracted",
    }


def _scheduler_cap(seen: Seen) -> Verdict | None:
    running, queued, most = seen.running, seen.queued, seen.server.get("max_running_reqs")
    cap = seen.running_cap or most
    if running is None or queued is None or not cap or queued < QUEUED or running < AT_CAP * cap:
        return None
    where = f"max-running-requests {seen.running_cap}" if seen.running_cap else f"the most that ran, {most:.0f}"
    return {"name": "scheduler cap", "evidence": f"{running:.1f} requests running on average at {where}, {queued:.1f} queued"}


def _pcie(seen: Seen) -> Verdict | None:
    gpus, link = seen.gpus, seen.link_mb_s
    if not gpus or not link or gpus["pcie_mb_s"] < PCIE_SHARE * 2 * link:
        return None
    share = gpus["pcie_mb_s"] / (2 * link)
    return {
        "name": "PCIe",
        "evidence": f"GPU {gpus['pcie_gpu']} moved {gpus['pcie_mb_s']:,.0f} MB/s rx+tx (median), "
        f"{100 * share:.0f}% of its link both ways ({2 * link:,.0f} MB/s)",
    }


def _gpu_compute(seen: Seen) -> Verdict | None:
    gpus = seen.gpus
    if not gpus or gpus["sm_busiest"] < SM_BUSY:
        return None
    return {
        "name": "GPU compute",
        "evidence": f"SM busy {gpus['sm_busiest']:.0f}% (median) on GPU {gpus['sm_busiest_gpu']} "
        f"({gpus['sm_mean']:.0f}% over all sampled GPUs)",
    }


# The rules in order, the first that holds wins (the module's docstring says each). To add one: a function of
# `Seen` that returns {"name", "evidence"} or None, put where it ranks (docs/extending.md).
RULES: list[Callable[[Seen], Verdict | None]] = [_load_generator, _kv_cache_full, _scheduler_cap, _pcie, _gpu_compute]


def bottleneck(level: Mapping[str, Any], *, link_mb_s: float | None = None, running_cap: int | None = None) -> Verdict:
    """{"name", "evidence"} for one measured level: the first of RULES that holds, else what ruled each out."""
    seen = Seen(
        loadgen=level.get("loadgen") or {},
        server=level.get("server_metrics") or {},
        gpus=gpu_telemetry.headline(level.get("gpus")),
        link_mb_s=link_mb_s,
        running_cap=running_cap,
    )
    for rule in RULES:
        if found := rule(seen):
            return found
    return _not_identified(seen)


def _not_identified(seen: Seen) -> Verdict:
    running, queued, gpus, peak_usage = seen.running, seen.queued, seen.gpus, seen.server.get("max_token_usage")
    if running is None and not gpus:
        return {
            "name": "not identified",
            "evidence": "nothing to judge by: no /metrics samples (serve with --enable-metrics, sample with "
            "--metrics-interval) and no GPU telemetry (--server-host, with --gpu-interval above 0)",
        }
    ruled_out = [f"{_figure(running)} running, {_figure(queued)} queued"]
    if peak_usage is not None:
        ruled_out.append(f"token usage at most {peak_usage:.2f}")
    if gpus:
        ruled_out.append(f"SM busy at most {gpus['sm_busiest']:.0f}%")
        if seen.link_mb_s:
            ruled_out.append(f"PCIe at most {100 * gpus['pcie_mb_s'] / (2 * seen.link_mb_s):.0f}% of the link")
    else:
        ruled_out.append("no GPU telemetry")
    return {"name": "not identified", "evidence": "no rule held: " + ", ".join(ruled_out)}


# What fixed such hangs on the field notes' kind of box (8 PCIe cards without NVLink; SGLang and NCCL issues):
# peer-to-peer and cuMem off, and on one topology SGLang's custom all-reduce off.
HANG_WORKAROUNDS = (
    "--grid env.NCCL_P2P_DISABLE=1",
    "--grid env.NCCL_CUMEM_ENABLE=0",
    "--grid disable-custom-all-reduce=true",
)


def hang(level: Mapping[str, Any]) -> dict[str, str]:
    """The verdict on a level that ended as a hang, with the known workarounds as search axes."""
    return {
        "name": "communication hang",
        "evidence": f"{level.get('error') or 'no token with requests open'}; known workarounds on PCIe boxes, to try as"
        f" axes: {', '.join(HANG_WORKAROUNDS)}",
    }


def running_cap(server: Mapping[str, Any]) -> int | None:
    """max-running-requests from the server's description: /server_info's arguments, or its command line."""
    args = server.get("server_args") or {}
    value = args.get("max_running_requests") if isinstance(args, Mapping) else None
    words = str(server.get("command") or "").split()
    if value is None and "--max-running-requests" in words[:-1]:
        value = words[words.index("--max-running-requests") + 1]
    try:
        return int(value) if value is not None and int(value) > 0 else None
    except (TypeError, ValueError):
        return None


def attach(levels: list[dict[str, Any]], server: Mapping[str, Any]) -> None:
    """Name each measured level's bottleneck (in place), with the link and the cap the server's description gives."""
    link, cap = gpu_telemetry.link_mb_s(server.get("gpus")), running_cap(server)
    for level in levels:
        if level.get("status") == "hung":
            level["bottleneck"] = hang(level)
        elif level.get("status") != "failed":
            level["bottleneck"] = bottleneck(level, link_mb_s=link, running_cap=cap)


def line(level: Mapping[str, Any]) -> str:
    """The level's bottleneck in one line, for the reports ('' when it has none)."""
    found = level.get("bottleneck")
    return f"{found['name']}: {found['evidence']}" if found else ""
