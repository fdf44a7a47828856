"""Does a layout's share of the weights fit in its GPUs, and how much KV cache is left?

SGLang reserves mem_fraction_static of each GPU for weights plus the KV pool;
what the weights leave of it is the KV cache. MLA keeps the whole compressed
latent of every token on every TP rank; GQA splits KV heads over TP.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_layout import parallel
from sglang_layout.findings import Finding
from sglang_layout.model_size import GIB, ModelWeights, pp_stage_layers
from sglang_layout.schema import Layout

DEFAULT_MEM_FRACTION = 0.85  # used only when the layout does not set mem-fraction-static
KV_DTYPE_BYTES = {
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "mxfp8": 1.0 + 1 / 32,
    "fp4_mx_block16": 0.5 + 1 / 16,
    "nvfp4": 0.5 + 1 / 16,
    "bf16": 2.0,
    "bfloat16": 2.0,
}


@dataclass(frozen=True)
class MemoryFit:
    gpus_used: int
    weights_total_gib: float
    weights_per_gpu_gib: float  # the fullest GPU (worst pipeline stage)
    usable_per_gpu_gib: float  # GPU memory x mem-fraction-static
    mem_fraction: float
    gpu_memory_gib: float
    kv_tokens: int  # KV cache tokens that fit on the tightest GPU
    kv_bytes_per_token: float

    @property
    def headroom_gib(self) -> float:
        return self.usable_per_gpu_gib - self.weights_per_gpu_gib

    @property
    def fits(self) -> bool:
        return self.headroom_gib > 0


def _float_arg(layout: Layout, name: str, default: float) -> float:
    try:
        return float(layout.arg(name, default))
    except (TypeError, ValueError):
        return default


def kv_bytes_per_token_layer(weights: ModelWeights, layout: Layout) -> float:
    dtype = str(layout.arg("kv-cache-dtype", "auto"))
    value_bytes = KV_DTYPE_BYTES.get(dtype, weights.dtype_bytes)
    if weights.kv_heads is None:  # MLA: the latent is replicated on every TP rank
        return weights.kv_values_per_token_layer * value_bytes
    heads_per_rank = max(1, -(-weights.kv_heads // layout.tp))
    return 2 * heads_per_rank * (weights.head_dim or 0) * value_bytes


def stage_bytes(weights: ModelWeights, layout: Layout) -> list[tuple[float, int]]:
    """(weight bytes on one GPU, layers held) for each pipeline stage."""
    tp = layout.tp
    moe_dp = max(1, int(_float_arg(layout, "moe-dp-size", 1)))
    attn_dp = max(1, int(_float_arg(layout, "attn-dp-size", 1)))
    stages = pp_stage_layers(len(weights.layers), layout.pp) if weights.layers else [range(0)] * layout.pp
    result = []
    for number, layer_ids in enumerate(stages):
        total = 0.0
        for i in layer_ids:
            layer = weights.layers[i]
            # DP attention replicates attention weights across attention-DP groups.
            total += layer.sharded * attn_dp / tp + layer.replicated + layer.experts * moe_dp / tp
        if number == 0:
            total += weights.embed / tp
        if number == len(stages) - 1:
            total += weights.lm_head / tp
        if not weights.layers:
            total = weights.total / (tp * layout.pp)
        result.append((total, len(layer_ids)))
    return result


def memory_fit(weights: ModelWeights, layout: Layout, gpu_memory_gib: float) -> MemoryFit:
    fraction = _float_arg(layout, "mem-fraction-static", DEFAULT_MEM_FRACTION)
    usable = gpu_memory_gib * fraction * GIB
    per_token_layer = kv_bytes_per_token_layer(weights, layout)
    stages = stage_bytes(weights, layout)
    worst = max(b for b, _ in stages)
    kv_tokens = min((int(max(usable - b, 0) / (per_token_layer * n)) if per_token_layer and n else 0) for b, n in stages)
    worst_layers = max((n for _, n in stages), default=0)
    return MemoryFit(
        gpus_used=layout.gpus_used,
        weights_total_gib=weights.total / GIB,
        weights_per_gpu_gib=worst / GIB,
        usable_per_gpu_gib=usable / GIB,
        mem_fraction=fraction,
        gpu_memory_gib=gpu_memory_gib,
        kv_tokens=kv_tokens,
        kv_bytes_per_token=per_token_layer * worst_layers,
    )


def check_memory(fit: MemoryFit, layout: Layout, gpu_count: int | None = None) -> list[Finding]:
    findings: list[Finding] = []
    numbers = (
        f"weights ~{fit.weights_total_gib:.0f} GiB need ~{fit.weights_per_gpu_gib:.1f} GiB per GPU, "
        f"but only {fit.usable_per_gpu_gib:.1f} GiB per GPU are usable "
        f"({fit.gpu_memory_gib:g} GiB x {fit.mem_fraction:g})"
    )
    if not fit.fits:
        more = ""
        if gpu_count and layout.gpus_per_node < gpu_count:
            tp = parallel.largest_tp(gpu_count, layout)
            ep = f", ep {layout.ep}" if layout.ep > 1 and tp % layout.ep == 0 else ""
            more = f"on {gpu_count} GPUs{' per host' if layout.nnodes > 1 else ''} write tp {tp}{ep}; or "
        elif gpu_count:
            more = "span more hosts (nnodes, nodes); or "
        findings.append(
            Finding.error(
                "memory",
                f"{layout.name} uses {fit.gpus_used} GPUs; {numbers}: it will run out of memory loading the weights",
                f"{more}raise mem-fraction-static if activations allow, or use a smaller quantization",
            )
        )
        return findings
    if layout.arg("mem-fraction-static") is None:
        findings.append(
            Finding.info(
                "memory",
                f"{layout.name}: mem-fraction-static not set; assumed {DEFAULT_MEM_FRACTION} for the estimate",
                "set mem-fraction-static in sglang_common_args to make the estimate exact",
            )
        )
    context = int(_float_arg(layout, "context-length", 0))
    running = int(_float_arg(layout, "max-running-requests", 0))
    if context and fit.kv_tokens < context:
        findings.append(
            Finding.warning(
                "kv-cache",
                f"{layout.name}: only ~{fit.kv_tokens:,} KV-cache tokens fit after the weights "
                f"({fit.headroom_gib:.1f} GiB per GPU), less than one context-length {context:,} request",
                "lower context-length, raise mem-fraction-static, or use more GPUs",
            )
        )
    elif context and running and running * context > fit.kv_tokens:
        findings.append(
            Finding.warning(
                "kv-cache",
                f"{layout.name}: max-running-requests {running} x context-length {context:,} = {running * context:,} tokens, "
                f"but ~{fit.kv_tokens:,} KV-cache tokens fit; long requests will queue at high concurrency",
                f"expect at most ~{max(fit.kv_tokens // context, 1)} full-context requests at once, "
                "or choose a smaller kv-cache-dtype",
            )
        )
    return findings
