"""SGLang's parallel-width rules, one function each (read from SGLang 0.5.23's own code).

GPUs used = dp x tp x pp. EP is carved out of the TP group and adds no GPU;
each expert group is split again moe_tp = tp // ep // moe_dp ways.
"""

from __future__ import annotations

from sglang_layout.findings import Finding
from sglang_layout.schema import Layout

# Runners whose kernels only handle "no EP" or "EP over the whole TP group".
EP_ALL_OR_NOTHING_RUNNERS = frozenset({"flashinfer_cutlass", "flashinfer_cutedsl"})


def _int_arg(layout: Layout, name: str, default: int) -> int:
    value = layout.arg(name, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def largest_tp(gpu_count: int, layout: Layout) -> int:
    """The widest tp that fits the host (each of nnodes hosts) with this layout's dp and pp."""
    return max(1, gpu_count * layout.nnodes // (layout.dp * layout.pp))


def check_gpu_count(layout: Layout, gpu_count: int) -> list[Finding]:
    """GPUs per node against the host's GPUs (each node of a multi-node layout is checked with its own count)."""
    used = layout.gpus_per_node
    across = f" / nnodes {layout.nnodes}" if layout.nnodes > 1 else ""
    if used > gpu_count:
        return [
            Finding.error(
                "gpus",
                f"{layout.name} needs dp {layout.dp} x tp {layout.tp} x pp {layout.pp}{across} = {used} GPUs per host, "
                f"the host has {gpu_count}",
                f"make dp x tp x pp{across} at most {gpu_count}" + ("" if layout.nnodes > 1 else ", or span more hosts (nnodes)"),
            )
        ]
    if used < gpu_count:
        return [
            Finding.info(
                "gpus",
                f"{layout.name} uses {used} of the host's {gpu_count} GPUs (GPUs used = dp x tp x pp{across}; ep adds none)",
                f"to use all {gpu_count}, write tp {largest_tp(gpu_count, layout)}"
                + (f", ep {layout.ep}" if layout.ep > 1 else ""),
            )
        ]
    return []


def _nested_fix(layout: Layout, gpu_count: int | None) -> str:
    tp = largest_tp(gpu_count, layout) if gpu_count else None
    if tp and tp % layout.ep == 0:
        on = f"on {gpu_count} GPUs " if gpu_count else ""
        return f"SGLang nests EP inside TP: {on}write tp {tp}, ep {layout.ep}"
    return f"SGLang nests EP inside TP: choose ep among the divisors of tp {layout.tp}"


def check_ep_divides_tp(layout: Layout, gpu_count: int | None = None) -> list[Finding]:
    if layout.tp % layout.ep == 0:
        return []
    return [
        Finding.error(
            "ep-divides-tp",
            f"{layout.name}: ep {layout.ep} does not divide tp {layout.tp}",
            _nested_fix(layout, gpu_count),
        )
    ]


def moe_tp_width(layout: Layout) -> int:
    """Tensor-parallel width inside each expert group, as SGLang computes it."""
    moe_dp = _int_arg(layout, "moe-dp-size", 1)
    return layout.tp // layout.ep // max(moe_dp, 1)


def check_moe_tp_width(layout: Layout, gpu_count: int | None = None) -> list[Finding]:
    moe_dp = _int_arg(layout, "moe-dp-size", 1)
    width = moe_tp_width(layout)
    if width < 1:
        return [
            Finding.error(
                "moe-tp-width",
                f"{layout.name}: MoE TP width tp // ep // moe_dp = {layout.tp} // {layout.ep} // {moe_dp} = {width}; "
                "SGLang crashes with ZeroDivisionError at start-up",
                _nested_fix(layout, gpu_count),
            )
        ]
    if layout.tp % layout.ep == 0 and (layout.tp // layout.ep) % moe_dp != 0:
        return [
            Finding.error(
                "moe-tp-width",
                f"{layout.name}: moe-dp-size {moe_dp} does not divide tp / ep = {layout.tp // layout.ep}",
                "choose moe-dp-size among the divisors of tp / ep",
            )
        ]
    return []


def check_moe_dense_tp(layout: Layout) -> list[Finding]:
    value = layout.arg("moe-dense-tp-size")
    if value is None:
        return []
    dense = _int_arg(layout, "moe-dense-tp-size", -1)
    if dense in (1, layout.tp):
        return []
    return [
        Finding.error(
            "moe-dense-tp",
            f"{layout.name}: moe-dense-tp-size {value} must be unset, 1 or tp ({layout.tp})",
            "remove moe-dense-tp-size or set it to 1",
        )
    ]


def check_a2a_backend(layout: Layout) -> list[Finding]:
    backend = layout.arg("moe-a2a-backend")
    if backend in (None, "none") or layout.ep == layout.tp:
        return []
    return [
        Finding.error(
            "a2a-backend",
            f"{layout.name}: moe-a2a-backend {backend} runs EP over the whole TP group (ep = tp); "
            f"SGLang would silently turn ep {layout.ep} into {layout.tp}, so the command would not say what runs",
            f"set ep: {layout.tp}, or drop moe-a2a-backend",
        )
    ]


def check_moe_runner(layout: Layout) -> list[Finding]:
    runner = layout.arg("moe-runner-backend")
    if runner not in EP_ALL_OR_NOTHING_RUNNERS or layout.ep in (1, layout.tp):
        return []
    return [
        Finding.error(
            "moe-runner",
            f"{layout.name}: moe-runner-backend {runner} needs ep 1 or ep = tp ({layout.tp}), not {layout.ep}",
            f"set ep to 1 or {layout.tp}, or choose another runner",
        )
    ]


def check_nnodes(layout: Layout) -> list[Finding]:
    nnodes = layout.nnodes
    if (layout.tp * layout.pp) % nnodes == 0:
        return []
    return [
        Finding.error(
            "nnodes",
            f"{layout.name}: tp x pp = {layout.tp * layout.pp} is not divisible by nnodes {nnodes}",
            "make tp x pp a multiple of nnodes",
        )
    ]


def check_experts_divisible(layout: Layout, routed_experts: int | None) -> list[Finding]:
    if not routed_experts or routed_experts % layout.ep == 0:
        return []
    return [
        Finding.error(
            "experts-divisible",
            f"{layout.name}: {routed_experts} routed experts cannot be split evenly {layout.ep} ways",
            f"choose ep among the divisors of {routed_experts} that divide tp {layout.tp}",
        )
    ]


def check_deprecated(layout: Layout) -> list[Finding]:
    if layout.arg("enable-dp-attention") is None:
        return []
    return [
        Finding.warning(
            "deprecated",
            f"{layout.name}: --enable-dp-attention is deprecated in recent SGLang",
            "use attn-dp-size instead",
        )
    ]


def check_parallel(layout: Layout, gpu_count: int | None, routed_experts: int | None) -> list[Finding]:
    """Every parallel rule for one layout, in the order a person would fix them."""
    findings: list[Finding] = []
    if gpu_count is not None:
        findings += check_gpu_count(layout, gpu_count)
    findings += check_ep_divides_tp(layout, gpu_count)
    findings += check_moe_tp_width(layout, gpu_count)
    findings += check_moe_dense_tp(layout)
    findings += check_a2a_backend(layout)
    findings += check_moe_runner(layout)
    findings += check_nnodes(layout)
    findings += check_experts_divisible(layout, routed_experts)
    findings += check_deprecated(layout)
    return findings
