"""What nvidia-smi says about a host's GPUs, as the record preflight reads (facts.d `sglang_gpus`)."""

from __future__ import annotations

from typing import Any

# The query the cuda_toolkit role runs; the parser below expects these columns in this order.
QUERY_FIELDS = ("index", "name", "memory.total", "driver_version")
MIB_PER_GIB = 1024


def parse_gpu_query(text: str) -> dict[str, Any]:
    """`nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits` -> record.

    Memory is per GPU in MiB as nvidia-smi reports it; the record's `memory_gib` is the smallest GPU's,
    since a layout is only as roomy as its tightest GPU.
    """
    gpus = []
    for number, line in enumerate(text.strip().splitlines(), start=1):
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(QUERY_FIELDS):
            raise ValueError(f"nvidia-smi line {number} has {len(cells)} fields, expected {len(QUERY_FIELDS)}: {line!r}")
        index, name, memory, driver = cells
        try:
            gpus.append({"index": int(index), "name": name, "memory_mib": int(float(memory)), "driver_version": driver})
        except ValueError as exc:
            raise ValueError(f"nvidia-smi line {number} is not index, name, MiB, driver: {line!r}") from exc
    if not gpus:
        raise ValueError("nvidia-smi listed no GPUs")
    smallest = min(gpu["memory_mib"] for gpu in gpus)
    names = sorted({gpu["name"] for gpu in gpus})
    return {
        "count": len(gpus),
        "name": names[0] if len(names) == 1 else " / ".join(names),
        "memory_mib": smallest,
        "memory_gib": round(smallest / MIB_PER_GIB, 2),
        "driver_version": gpus[0]["driver_version"],
        "gpus": gpus,
    }
