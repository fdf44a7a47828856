"""What nvidia-smi says about a host's GPUs, as the record preflight reads (facts.d `sglang_gpus`)."""

from __future__ import annotations

from typing import Any

# The query the sglang_gpus role runs; the parser below expects these columns in this order. The compute
# capability (9.0 on an H200, 10.0 on a B200, 12.0 on an RTX PRO 6000 Blackwell) decides which kernels and
# backends SGLang can use; the PCIe link, what all-reduce and all-to-all cost between GPUs without NVLink; the
# power limits, what `nvidia-smi -pl` accepts (a layout's power_limit is checked against them before a start).
QUERY_FIELDS = (
    *("index", "name", "memory.total", "driver_version", "compute_cap", "pcie.link.gen.max", "pcie.link.width.max"),
    *("power.min_limit", "power.max_limit"),
)
MIB_PER_GIB = 1024
_NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "")


def _known(cell: str) -> str | None:
    return None if cell in _NOT_AVAILABLE else cell


def _parse_line(number: int, line: str) -> dict[str, Any]:
    cells = [cell.strip() for cell in line.split(",")]
    if len(cells) != len(QUERY_FIELDS):
        raise ValueError(f"nvidia-smi line {number} has {len(cells)} fields, expected {len(QUERY_FIELDS)}: {line!r}")
    index, name, memory, driver, capability, gen, width, least, most = cells
    try:
        gpu = {"index": int(index), "name": name, "memory_mib": int(float(memory)), "driver_version": driver}
        gpu["compute_capability"] = _known(capability) and str(float(capability))
        gpu["pcie_gen"] = int(gen) if _known(gen) else None
        gpu["pcie_width"] = int(width) if _known(width) else None
        gpu["power_min_w"] = float(least) if _known(least) else None
        gpu["power_max_w"] = float(most) if _known(most) else None
    except ValueError as exc:
        raise ValueError(
            f"nvidia-smi line {number} is not index, name, MiB, driver, compute capability, PCIe gen, PCIe width,"
            f" lowest and highest power limit: {line!r}"
        ) from exc
    return gpu


def parse_gpu_query(text: str) -> dict[str, Any]:
    """`nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits` -> record.

    Memory is per GPU in MiB as nvidia-smi reports it; the record's `memory_gib` is the smallest GPU's,
    since a layout is only as roomy as its tightest GPU. Likewise the compute capability and the PCIe link
    are the lowest found (None when nvidia-smi reports none), and the power limits the range every GPU accepts.
    """
    gpus = [_parse_line(number, line) for number, line in enumerate(text.strip().splitlines(), start=1)]
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
        "compute_capability": _lowest([gpu["compute_capability"] for gpu in gpus], key=float),
        "pcie_gen": _lowest([gpu["pcie_gen"] for gpu in gpus]),
        "pcie_width": _lowest([gpu["pcie_width"] for gpu in gpus]),
        "power_min_w": _highest([gpu["power_min_w"] for gpu in gpus]),
        "power_max_w": _lowest([gpu["power_max_w"] for gpu in gpus]),
        "gpus": gpus,
    }


def _lowest(values: list[Any], key: Any = None) -> Any:
    known = [value for value in values if value is not None]
    return min(known, key=key) if known else None


def _highest(values: list[Any]) -> Any:
    known = [value for value in values if value is not None]
    return max(known) if known else None


def power_range(record: dict[str, Any]) -> tuple[float, float] | None:
    """The power limits (W) `nvidia-smi -pl` accepts on every GPU of the record; None when it has none (a record
    written before they were asked for, or GPUs that do not report them)."""
    least, most = (record or {}).get("power_min_w"), (record or {}).get("power_max_w")
    return (float(least), float(most)) if least is not None and most is not None else None


def describe(record: dict[str, Any]) -> str:
    """One line for status and preflight: '8 x NAME, 94.97 GiB each, compute capability 12.0, PCIe Gen5 x16, driver D'.
    A record written before the capability and link were asked for says so."""
    if not record:
        return "no GPU record"
    parts = [f"{record['count']} x {record['name']}", f"{record['memory_gib']} GiB each"]
    capability = record.get("compute_capability")
    parts.append(f"compute capability {capability}" if capability else "compute capability not recorded")
    gen, width = record.get("pcie_gen"), record.get("pcie_width")
    parts.append(f"PCIe Gen{gen} x{width}" if gen and width else "PCIe link not recorded")
    parts.append(f"driver {record['driver_version']}")
    return ", ".join(parts)
