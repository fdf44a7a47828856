"""A rehearsal box made to look like the field notes' GPU host at its edges, ready for the real playbooks.

The stand-ins (nvidia-smi, the CUDA apt repo, the sglang wheelhouse) sit at the edges only; the
playbooks and roles run unchanged against it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import sys
from pathlib import Path

from tests.rehearsal import box as boxes
from tests.rehearsal import standin
from tests.rehearsal.playbook import REPO, write_inventory

KIMI_CONFIG = REPO / "examples" / "models" / "kimi-k2.6" / "config.json"
MODEL_PATH = "/srv/models/Kimi-K2.6"
# 8 x ~95 GiB GPUs serving a ~1T INT4 model (553 GiB of weights), clocked after the field notes' table:
# one request decodes at TP8 26.3, PP8 37, EP8 65 tok/s (EP4 has no C=1 figure there: 45 here), and
# aggregate output saturates at TP8 808, PP8 396, EP8 961, EP4 1,531 tok/s. Layout keys are tpN-epN-ppN-dpN.
GPU_HOST = {
    "gpu_count": 8,
    "gpu_memory_gib": 94.97,
    "driver_version": "580.95.05",
    "weights_gib": 553,
    # A second's load (the real one takes minutes: docs/search.md) split so that each of SGLang's startup lines
    # comes at least 0.2 s after the one before: the record's tenths of a second keep them in order.
    "load_seconds": 1,
    "startup_split": {"weights": 0.5, "kv_cache": 0.2, "graphs": 0.3},
    "itl_ms": {"default": 38.0, "tp1-ep1-pp8-dp1": 27.0, "tp8-ep8-pp1-dp1": 15.4, "tp8-ep4-pp1-dp1": 22.2},
    "peak_tok_s": {"default": 808.0, "tp1-ep1-pp8-dp1": 396.0, "tp8-ep8-pp1-dp1": 961.0, "tp8-ep4-pp1-dp1": 1531.0},
    # Two knobs that pay here, each where it pays, as the field's did: 4 continuous decode steps shorten
    # EP8's inter-token time by a fifth (C=1 +25%, on the C=1 layout) and lift EP4's roofline 12%;
    # NCCL_P2P_DISABLE=1 lifts EP4's roofline 20% (the peak layout), only with more than 16 requests
    # decoding (P2P off paid at high concurrency only). A 300 W GPU power limit (600 W the default and most)
    # takes 29% off every roofline above 4 requests and nothing below, as the field's 300 vs 500 W did.
    # Every other value does nothing.
    "effects": [
        {"host": "power_limit", "value": 300, "peak_factor": 0.71, "above": 4},
        {"flag": "num-continuous-decode-steps", "value": 4, "itl_factor": 0.8, "layouts": ["tp8-ep8-pp1-dp1"]},
        {"flag": "num-continuous-decode-steps", "value": 4, "peak_factor": 1.12, "layouts": ["tp8-ep4-pp1-dp1"]},
        {"env": "NCCL_P2P_DISABLE", "value": "1", "peak_factor": 1.2, "above": 16, "layouts": ["tp8-ep4-pp1-dp1"]},
    ],
}


def true_aggregate_tok_s(
    layout_key: str, concurrency: int, tokens: int, simulation: dict | None = None, knobs: dict | None = None
) -> float:
    """The stand-in's aggregate output with C requests of `tokens` each in a closed loop: C x tokens per request
    time, which is the prefill (its first token comes after it) and tokens - 1 inter-token times."""
    sim = simulation or GPU_HOST
    itl_s = 1.0 / true_decode_tok_s(layout_key, concurrency, sim, knobs)
    return concurrency * tokens / (sim.get("prefill_ms", 20.0) / 1000.0 + (tokens - 1) * itl_s)


def true_decode_tok_s(layout_key: str, running: int, simulation: dict | None = None, knobs: dict | None = None) -> float:
    """The stand-in's per-request decode rate with `running` requests decoding: its clock, for test truths.
    `knobs`: a search candidate's values (`flag`, `env.VARIABLE` or `host.SETTING` -> value), for the simulation's
    effects."""
    sim = simulation or GPU_HOST
    itl_ms = sim["itl_ms"].get(layout_key, sim["itl_ms"]["default"])
    peak = sim.get("peak_tok_s", {}).get(layout_key, sim.get("peak_tok_s", {}).get("default"))
    for effect in sim.get("effects", []):
        kind = next(kind for kind in ("flag", "env", "host") if kind in effect)
        axis = effect["flag"] if kind == "flag" else f"{kind}.{effect[kind]}"
        if effect.get("layouts") and layout_key not in effect["layouts"]:
            continue
        if str((knobs or {}).get(axis)).lower() == str(effect["value"]).lower() and running > effect.get("above", 0):
            itl_ms *= effect.get("itl_factor", 1.0)
            peak = peak * effect.get("peak_factor", 1.0) if peak else peak
    return 1000.0 / max(itl_ms, 1000.0 * running / peak if peak else 0.0)


def serving_vars(port: int) -> dict[str, object]:
    """Where the server listens on a box (boxes share the host's network: each needs its own port)."""
    return {
        "sglang_model_path": MODEL_PATH,
        "sglang_port": port,
        "sglang_bind_address": "127.0.0.1",
        "sglang_service_health_interval": 0.5,
        "sglang_service_health_timeout": 60,
    }


def prepare(box: boxes.Box, directory: Path, repo_base_url: str, simulation: dict | None = None, **host_vars: object) -> Path:
    """Stand-in edges on the box (simulating GPU_HOST unless told otherwise), the model's config.json, an inventory."""
    standin.make_gpu_host(box.root, **(GPU_HOST if simulation is None else simulation))
    model = box.root / MODEL_PATH.lstrip("/")
    model.mkdir(parents=True, exist_ok=True)
    shutil.copy(KIMI_CONFIG, model / "config.json")
    return write_inventory(box, directory, **{**standin.provision_vars(repo_base_url), **host_vars})


def read_simulation(path: Path) -> dict:
    """A simulation file (the stand-in's schema: tests/standins/sglang/sglang/simulation.py), checked before any box starts."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"REHEARSAL_SIMULATION={path}: not a readable JSON file ({exc})") from exc
    spec = importlib.util.spec_from_file_location("standin_simulation", standin.SOURCE / "sglang" / "simulation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    known = {item.name for item in dataclasses.fields(module.Simulation)}
    if not isinstance(data, dict) or set(data) - known:
        unknown = ", ".join(sorted(set(data) - known)) if isinstance(data, dict) else "not an object"
        raise ValueError(f"REHEARSAL_SIMULATION={path}: {unknown}; the fields are {', '.join(sorted(known))}")
    return data
