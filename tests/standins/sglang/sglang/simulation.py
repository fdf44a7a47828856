"""STAND-IN: the simulated hardware and model, from a file the test fixture writes.

Deliberately independent of the project's own memory estimate, so the two can disagree and be caught.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PATH = "/etc/sglang-standin.json"
# The GPUs' power limits set with the stand-in `nvidia-smi -pl` (tests/standins/nvidia-smi: the same path),
# {"GPU index": watts}; under /run, so a reboot forgets them as a real driver does.
POWER_STATE = "/run/sglang-standin/power-limits.json"


@dataclass(frozen=True)
class Simulation:
    gpu_count: int = 8
    gpu_memory_gib: float = 95.0
    gpu_name: str = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    driver_version: str = "580.95.05"
    gpu_compute_cap: str = "12.0"  # what the stand-in nvidia-smi reports (9.0 an H100/H200, 10.0 a B200)
    weights_gib: float = 10.0
    # Another model on the same box (several servers on one machine): its weights by --model-path.
    weights_gib_by_model: dict[str, float] = field(default_factory=dict)
    load_seconds: float = 1.0
    # How the load splits into SGLang's startup phases, as fractions of load_seconds, each ended by the line the
    # real server logs (weights, KV cache, CUDA graphs; --disable-cuda-graph skips the capture). A large MoE
    # on the field notes' box: weights about half, graph capture about 3.5 of 7.5 minutes.
    startup_split: dict[str, float] = field(default_factory=lambda: {"weights": 0.5, "kv_cache": 0.05, "graphs": 0.45})
    prefill_ms: float = 20.0
    # Inter-token time of one request = itl_ms[layout key or "default"] + itl_slope_ms x running requests,
    # but never shorter than running / peak_tok_s[layout key or "default"] (the box's decode roofline:
    # aggregate output cannot pass it however many requests run). No peak entry: no roofline.
    itl_ms: dict[str, float] = field(default_factory=lambda: {"default": 10.0})
    itl_slope_ms: float = 0.0
    peak_tok_s: dict[str, float] = field(default_factory=dict)
    # At most this many requests decode at once (SGLang's --max-running-requests overrides it; 0: no cap);
    # the rest wait in a queue, so their TTFT grows as on a saturated server.
    max_running_requests: int = 0
    eos_after: int = 32
    # Tokens per streamed chunk when --stream-interval is not given (SGLang's default is 1).
    stream_interval: int = 1
    # False: ignore stream_options.continuous_usage_stats (a server that only sends the final usage).
    continuous_usage: bool = True
    # True: every generation request fails with HTTP 500 (the health check still passes).
    fail_requests: bool = False
    # Multi-node layouts: seconds a rank waits for the others at rank 0's --dist-init-addr (--dist-timeout wins).
    rendezvous_timeout_s: float = 30.0
    # What a knob does on this box: each {"flag": NAME (without dashes) or "env": VARIABLE, "value": V,
    # "itl_factor": F, "peak_factor": G, "above": C} multiplies the inter-token time by F and the roofline by G
    # while the server runs with that flag (or environment variable) at that value and more than C requests
    # decode (C 0 or absent: always). So a file can describe a box where an env value wins only at peak and a
    # flag at C=1, as the field's NCCL and scheduler settings did (FIELD-NOTES.md, "What others measured").
    # An effect's optional "layouts" (keys as itl_ms's, tp8-ep8-pp1-dp1) limits it to those layouts; one with
    # "cures_hang": true keeps the server from hanging (hang_above) while it runs with that knob. A host setting
    # is a knob too: {"host": "power_limit", "value": 300, ...} holds while the server's GPUs are limited to 300 W
    # (set with the stand-in nvidia-smi -pl before it starts, as a layout's power_limit does).
    effects: list[dict[str, Any]] = field(default_factory=list)
    # A communication hang, per layout key or "default": once more requests than this decode at once, the server
    # sends no token again (NCCL peer-to-peer on some PCIe boxes; FIELD-NOTES.md). 0 or absent: never.
    hang_above: dict[str, int] = field(default_factory=dict)
    # Speculative decoding (the server started with --speculative-algorithm): each decode step emits the next
    # of these accepted lengths in turn (their mean is the acceptance length; 2.5 here), streamed as one
    # chunk of that many tokens, and a step takes the inter-token time x speculative_step_factor (verifying
    # the draft costs more than one plain step).
    speculative_accept: list[int] = field(default_factory=lambda: [3, 1, 4, 2])
    speculative_step_factor: float = 1.2
    # The KV cache, in tokens (0: unbounded; the server's --max-total-tokens wins). Each decoding request
    # holds kv_prompt_tokens plus what it has generated; a step that would overfill the cache retracts the
    # request, as SGLang does: it gives its tokens back, waits for room and recomputes its prefill
    # (sglang:token_usage, num_retracted_requests_total).
    kv_tokens: int = 0
    kv_prompt_tokens: int = 0
    # What the stand-in nvidia-smi's dmon shows for a layout's GPUs (tests/standins/nvidia-smi): SM busy is
    # gpu_sm_at_roofline % x (tokens/s / the layout's roofline), memory busy 80% of that, power from idle to
    # gpu_power_w; each GPU moves pcie_kb_per_token x tokens/s x (tp - 1) / tp each way (tensor parallelism's
    # all-reduces; tp 1 moves none). The other GPUs idle.
    gpu_sm_at_roofline: float = 99.0
    gpu_power_w: float = 600.0  # also the default and highest power limit (nvidia-smi's power.max_limit)
    gpu_min_power_w: float = 150.0  # the lowest power limit nvidia-smi -pl accepts
    gpu_idle_power_w: float = 30.0
    pcie_kb_per_token: float = 64.0
    pcie_gen: int = 5
    pcie_width: int = 16

    def base_itl_ms(self, tp: int, ep: int, pp: int, dp: int) -> float:
        return float(_per_layout(self.itl_ms, tp, ep, pp, dp) or 10.0)

    def peak(self, tp: int, ep: int, pp: int, dp: int) -> float | None:
        """The layout's aggregate decode roofline in tokens per second, if the simulation sets one."""
        value = _per_layout(self.peak_tok_s, tp, ep, pp, dp)
        return float(value) if value else None


# What an effect's knob is, by the key that names it: the value this server runs with, or None. To add a kind:
# a row here, keyed by the effect's field (docs/extending.md); the effects table and the truths take it as it is.
EFFECT_KINDS: dict[str, Callable[[str, object, Mapping[str, str], Mapping[str, float]], Any]] = {
    "flag": lambda name, args, environ, host: getattr(args, name.replace("-", "_"), None),
    "env": lambda name, args, environ, host: environ.get(name),
    "host": lambda name, args, environ, host: host.get(name),
}


def _same(actual: Any, wanted: Any) -> bool:
    """A knob's value against the effect's: numbers as numbers (300 W is 300.0), the rest as case-free text."""
    try:
        return float(actual) == float(wanted)
    except (TypeError, ValueError):
        return str(actual).lower() == str(wanted).lower()


def active_effects(
    effects: list[dict[str, Any]],
    args: object,
    environ: Mapping[str, str],
    layout_key: str = "",
    host: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The effects whose knob (a flag, an environment value, a host setting: EFFECT_KINDS) this server runs with at
    the effect's value, on its layout (`tp8-ep8-pp1-dp1`)."""
    found = []
    for effect in effects:
        if effect.get("layouts") and layout_key not in effect["layouts"]:
            continue
        kind = next(kind for kind in EFFECT_KINDS if kind in effect)
        actual = EFFECT_KINDS[kind](str(effect[kind]), args, environ, host or {})
        if actual is not None and _same(actual, effect["value"]):
            found.append(effect)
    return found


def host_settings(sim: Simulation, gpus: list[int], state: str = POWER_STATE) -> dict[str, float]:
    """What the host sets for this server's GPUs: `power_limit`, the lowest of their limits (a GPU none was set
    for has the default, gpu_power_w)."""
    try:
        known = json.loads(Path(os.environ.get("SGLANG_STANDIN_POWER_STATE", state)).read_text())
    except (OSError, ValueError):
        known = {}
    return {"power_limit": min((float(known.get(str(gpu), sim.gpu_power_w)) for gpu in gpus), default=sim.gpu_power_w)}


def factor(effects: list[dict[str, Any]], key: str, running: int) -> float:
    """The product of the effects' `key` factors that hold with `running` requests decoding."""
    product = 1.0
    for effect in effects:
        if running > int(effect.get("above") or 0):
            product *= float(effect.get(key, 1.0))
    return product


def _per_layout(table: dict[str, float], tp: int, ep: int, pp: int, dp: int) -> float | None:
    return table.get(f"tp{tp}-ep{ep}-pp{pp}-dp{dp}", table.get("default"))


def load() -> Simulation:
    path = Path(os.environ.get("SGLANG_STANDIN_CONFIG", DEFAULT_PATH))
    if not path.exists():
        return Simulation()
    return Simulation(**json.loads(path.read_text()))
