"""What the GPUs did during a level: `nvidia-smi dmon -s putm` samples, parsed and summed up per GPU. Pure.

`dmon -s putm -o DT` prints a header line naming its columns (`#Date Time gpu pwr gtemp mtemp sm mem
enc dec jpg ofa rxpci txpci fb bar1 ccpm`, the layout FIELD-NOTES.md records from a real H200), a line of
units, then one line per GPU per interval; a value the GPU does not report is `-`. The header is read
rather than assumed, so a driver that adds or moves a column is still read by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

# What each level keeps per GPU (mean, median and p95): SM busy %, memory-bandwidth busy %, framebuffer used (MB),
# power (W), PCIe receive and transmit (MB/s).
FIELDS = ("sm", "mem", "fb", "pwr", "rxpci", "txpci")
# PCIe per lane and direction, in MB/s, after line coding (gen -> GT/s x 128/130 / 8, gen 1-2 8b/10b).
LANE_MB_S = {1: 250.0, 2: 500.0, 3: 984.6, 4: 1969.2, 5: 3938.5, 6: 7876.9}


def parse_dmon(text: str) -> list[dict[str, Any]]:
    """One dict per sample line: `gpu` (int) and every numeric column by its header name ('-' is None)."""
    columns: list[str] = []
    samples = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0].startswith("#"):
            names = [words[0].lstrip("#").lower(), *(w.lower() for w in words[1:])]
            if "gpu" in names:
                columns = [name for name in names if name]
            continue
        if not columns or len(words) != len(columns):
            continue  # no header yet, or a line cut short (the sampler was stopped mid-write)
        row = dict(zip(columns, words, strict=True))
        try:
            sample: dict[str, Any] = {"gpu": int(row["gpu"])}
        except ValueError:
            continue
        for name in FIELDS:
            value = row.get(name, "-")
            try:
                sample[name] = float(value)
            except ValueError:
                sample[name] = None
        samples.append(sample)
    return samples


def summarize(samples: Iterable[Mapping[str, Any]], interval_s: float) -> dict[str, Any] | None:
    """Per GPU, the mean, median and p95 of each field over the level; None without a sample."""
    by_gpu: dict[int, list[Mapping[str, Any]]] = {}
    for sample in samples:
        by_gpu.setdefault(int(sample["gpu"]), []).append(sample)
    if not by_gpu:
        return None
    per_gpu = {}
    for gpu, rows in sorted(by_gpu.items()):
        figures = {}
        for name in FIELDS:
            values = np.asarray([r[name] for r in rows if r.get(name) is not None], dtype=float)
            figures[name] = (
                {"mean": float(values.mean()), "p50": float(np.median(values)), "p95": float(np.percentile(values, 95))}
                if values.size
                else None
            )
        per_gpu[str(gpu)] = figures
    return {"interval_s": interval_s, "samples": max(len(rows) for rows in by_gpu.values()), "per_gpu": per_gpu}


def link_mb_s(gpus: Mapping[str, Any] | None) -> float | None:
    """One direction of a GPU's PCIe link in MB/s, from the host's GPU record (pcie gen and width), or None."""
    if not gpus:
        return None
    try:
        gen, width = int(gpus.get("pcie_gen") or 0), int(gpus.get("pcie_width") or 0)
    except (TypeError, ValueError):
        return None
    return LANE_MB_S[gen] * width if gen in LANE_MB_S and width > 0 else None


def headline(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The level's GPUs in a few figures, each a GPU's median over the level (the sampler starts before the
    level's first request and stops after its last, so a mean would count those idle edges): the busiest
    GPU's SM %, all GPUs' SM %, the largest PCIe rx+tx of one GPU (MB/s), with which GPU; the summed power.
    None without telemetry."""
    if not summary or not summary.get("per_gpu"):
        return None
    per_gpu = summary["per_gpu"]

    def typical(gpu: str, name: str) -> float:
        figure = per_gpu[gpu].get(name)
        return figure.get("p50", figure["mean"]) if figure else 0.0

    busiest = max(per_gpu, key=lambda gpu: typical(gpu, "sm"))
    pcie = max(per_gpu, key=lambda gpu: typical(gpu, "rxpci") + typical(gpu, "txpci"))
    return {
        "sm_busiest": typical(busiest, "sm"),
        "sm_busiest_gpu": int(busiest),
        "sm_mean": sum(typical(gpu, "sm") for gpu in per_gpu) / len(per_gpu),
        "pcie_mb_s": typical(pcie, "rxpci") + typical(pcie, "txpci"),
        "pcie_gpu": int(pcie),
        "power_w": sum(typical(gpu, "pwr") for gpu in per_gpu),
    }
