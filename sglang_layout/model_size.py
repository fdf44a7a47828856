"""How many bytes a model's weights take, and where they sit, from its config.json.

The estimate counts parameters by architecture (MLA or GQA attention, dense
MLP, routed and shared experts, router, embeddings) and prices each part by
the checkpoint's quantization (bf16/fp16, fp8 with block scales, INT4
compressed-tensors / AWQ / GPTQ with group scales). When the checkpoint's
model.safetensors.index.json is there, its exact total_size wins and the
estimate only decides how that total is spread over layers and GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

GIB = 1024**3

DTYPE_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "float32": 4.0,
    "float": 4.0,
    "float8_e4m3fn": 1.0,
    "float8_e5m2": 1.0,
}

# Parts that quantization methods may touch; embeddings, router and norms stay in the base dtype.
QUANTIZABLE = ("attention", "dense_mlp", "shared_experts", "routed_experts")


class ModelConfigError(ValueError):
    """config.json lacks what the estimate needs: names the key and the fix."""


@dataclass(frozen=True)
class LayerBytes:
    sharded: float  # split over the TP group (attention heads, MLP columns)
    replicated: float  # held whole by every TP rank (MLA's down-projections, router)
    experts: float  # routed experts: spread over the TP group by EP x MoE-TP


@dataclass(frozen=True)
class ModelWeights:
    """Weight bytes by where they live, and what the KV cache costs per token."""

    architecture: str
    layers: tuple[LayerBytes, ...]
    embed: float
    lm_head: float
    routed_experts: int | None
    kv_values_per_token_layer: int  # MLA: latent + rope; GQA: 2 x kv_heads x head_dim
    kv_heads: int | None  # None for MLA (latent replicated on every TP rank)
    head_dim: int | None
    dtype_bytes: float
    source: str  # "estimate from config.json" or "index total_size"
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return self.embed + self.lm_head + sum(layer.sharded + layer.replicated + layer.experts for layer in self.layers)

    def scaled_to(self, total_bytes: float, source: str) -> ModelWeights:
        factor = total_bytes / self.total if self.total else 1.0
        return replace(
            self,
            layers=tuple(
                LayerBytes(layer.sharded * factor, layer.replicated * factor, layer.experts * factor) for layer in self.layers
            ),
            embed=self.embed * factor,
            lm_head=self.lm_head * factor,
            source=source,
        )


@dataclass(frozen=True)
class QuantScheme:
    method: str
    base_bytes: float
    quant_bytes: float  # bytes per parameter of a quantized weight, scales included
    ignore: tuple[str, ...] = ()
    match: str = "substring"  # how `ignore` entries match module names

    def bytes_for(self, part: str, module: str) -> float:
        if self.method == "none" or part not in QUANTIZABLE or self._ignored(module):
            return self.base_bytes
        return self.quant_bytes

    def _ignored(self, module: str) -> bool:
        for entry in self.ignore:
            if entry.startswith("re:"):
                if re.match(entry[3:], module):
                    return True
            elif entry == module or entry in module:
                return True
        return False


# Whole-number fields of config.json the estimate reads, with the range a real model stays in.
# Checked up front so a string, a float or 1e9 layers is refused in words, not in a traceback or a hang.
INT_FIELDS = {
    "hidden_size": (1, 1_000_000),
    "num_hidden_layers": (1, 10_000),
    "num_attention_heads": (1, 100_000),
    "num_key_value_heads": (1, 100_000),
    "head_dim": (1, 100_000),
    "vocab_size": (1, 100_000_000),
    "kv_lora_rank": (0, 1_000_000),
    "q_lora_rank": (0, 1_000_000),
    "qk_rope_head_dim": (0, 100_000),
    "qk_nope_head_dim": (0, 100_000),
    "v_head_dim": (0, 100_000),
    "moe_layer_freq": (1, 10_000),
    "first_k_dense_replace": (0, 10_000),
    "decoder_sparse_step": (1, 10_000),
    "n_routed_experts": (0, 1_000_000),
    "num_local_experts": (0, 1_000_000),
    "num_experts": (0, 1_000_000),
    "n_shared_experts": (0, 10_000),
    "intermediate_size": (1, 100_000_000),
    "moe_intermediate_size": (1, 100_000_000),
    "shared_expert_intermediate_size": (0, 100_000_000),
}
QUANT_INT_FIELDS = {
    "num_bits": (1, 64),
    "bits": (1, 64),
    "w_bit": (1, 64),
    "group_size": (-1, 1_000_000),
    "q_group_size": (-1, 1_000_000),
}


def _whole(where: str, key: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ModelConfigError(f"{where} {key} = {str(value)[:60]!r} must be a whole number from {low} to {high}: check the file")


def _check_fields(cfg: Mapping[str, Any]) -> None:
    """Refuse, in words, the values the estimate could not use (types and ranges)."""
    for key, (low, high) in INT_FIELDS.items():
        if cfg.get(key) is not None:
            _whole("config.json", key, cfg[key], low, high)
    for key in ("architectures", "mlp_only_layers"):
        value = cfg.get(key)
        kind = str if key == "architectures" else int
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, kind) and not isinstance(v, bool) for v in value)
        ):
            raise ModelConfigError(f"config.json {key} = {str(value)[:60]!r} must be a list of {kind.__name__}: check the file")
    q = cfg.get("quantization_config")
    if q is None:
        return
    if not isinstance(q, Mapping):
        raise ModelConfigError(f"config.json quantization_config must be an object, not {type(q).__name__}: check the file")
    groups = q.get("config_groups")
    if groups is not None and not isinstance(groups, Mapping):
        raise ModelConfigError("config.json quantization_config.config_groups must be an object: check the file")
    inner = [
        g.get("weights") for g in (groups or {}).values() if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)
    ]
    for scope in [q, *inner]:
        for key, (low, high) in QUANT_INT_FIELDS.items():
            if scope.get(key) is not None:
                _whole("config.json quantization_config", key, scope[key], low, high)
    block = q.get("weight_block_size")
    if block is not None and not (
        isinstance(block, list)
        and len(block) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise ModelConfigError(f"quantization_config.weight_block_size = {str(block)[:60]!r} must be two positive whole numbers")
    for key in ("ignore", "modules_to_not_convert", "ignored_layers"):
        value = q.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ModelConfigError(f"quantization_config.{key} must be a list of module names: check the file")


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = ...) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    if default is ...:
        raise ModelConfigError(
            f"config.json has no {' / '.join(keys)}: cannot estimate the weights; "
            "add model.safetensors.index.json beside it, or fix the config"
        )
    return default


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config (multimodal checkpoints nest it under text_config)."""
    inner = cfg.get("text_config")
    if isinstance(inner, Mapping):
        merged = dict(inner)
        merged.setdefault("quantization_config", cfg.get("quantization_config"))
        merged.setdefault("torch_dtype", cfg.get("torch_dtype"))
        return merged
    return cfg


def base_dtype_bytes(cfg: Mapping[str, Any]) -> float:
    name = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "")
    if name not in DTYPE_BYTES:
        raise ModelConfigError(f"config.json torch_dtype {name!r} is not one of {', '.join(DTYPE_BYTES)}")
    # An fp8 checkpoint still keeps embeddings and norms in bf16.
    return max(DTYPE_BYTES[name], 2.0)


def _group_overhead(group_size: Any, scale_bytes: float, zero_bits: float, columns: int) -> float:
    """Scale (and zero point) bytes per weight for group-wise quantization."""
    size = int(group_size) if group_size not in (None, -1, 0) else columns  # -1 means one group per row
    return (scale_bytes + zero_bits / 8) / size


def quant_scheme(cfg: Mapping[str, Any]) -> QuantScheme:
    """Bytes per parameter for quantized and untouched weights, from quantization_config."""
    base = base_dtype_bytes(cfg)
    q = cfg.get("quantization_config")
    hidden = int(cfg.get("hidden_size") or 4096)
    if not q:
        return QuantScheme("none", base, base)
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        block = q.get("weight_block_size")
        scales = 4.0 / (block[0] * block[1]) if block else 0.0
        ignore = tuple(q.get("modules_to_not_convert") or q.get("ignored_layers") or ())
        return QuantScheme("fp8", base, 1.0 + scales, ignore)
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, Mapping) and g.get("weights")), None)
        if not weights:
            raise ModelConfigError("quantization_config (compressed-tensors) has no config_groups.*.weights")
        bits = int(weights.get("num_bits", 8))
        kind = weights.get("type", "int")
        strategy = weights.get("strategy", "tensor")
        if kind == "float" and bits == 4:  # nvfp4: one fp8 scale per 16 values
            per = 0.5 + 1 / 16
        elif strategy == "group":
            zero_bits = 0.0 if weights.get("symmetric", True) else bits
            per = bits / 8 + _group_overhead(weights.get("group_size"), 2.0, zero_bits, hidden)
        else:  # per-channel or per-tensor scales are negligible
            per = bits / 8 + 4.0 / hidden
        return QuantScheme("compressed-tensors", base, per, tuple(q.get("ignore") or ()), "compressed-tensors")
    if method in ("awq", "gptq"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = q.get("group_size") or q.get("q_group_size") or 128
        zero = bits if q.get("zero_point", True) or method == "gptq" else 0
        per = bits / 8 + _group_overhead(group, 2.0, zero, hidden)
        return QuantScheme(method, base, per, tuple(q.get("modules_to_not_convert") or ()))
    raise ModelConfigError(
        f"quantization_config.quant_method {method!r} is not priced by the estimate "
        "(known: fp8, compressed-tensors, awq, gptq); put model.safetensors.index.json beside config.json "
        "so its exact total_size is used"
    )


def _attention(cfg: Mapping[str, Any], hidden: int, heads: int) -> tuple[int, int, int, int | None, int | None]:
    """(sharded params, replicated params, kv values per token-layer, kv_heads, head_dim)."""
    if cfg.get("kv_lora_rank"):
        kv_rank = int(cfg["kv_lora_rank"])
        rope = int(_get(cfg, "qk_rope_head_dim"))
        nope = int(_get(cfg, "qk_nope_head_dim"))
        v_dim = int(_get(cfg, "v_head_dim"))
        q_rank = cfg.get("q_lora_rank")
        q_b = (int(q_rank) if q_rank else hidden) * heads * (nope + rope)
        q_a = hidden * int(q_rank) if q_rank else 0
        kv_a = hidden * (kv_rank + rope)
        kv_b = kv_rank * heads * (nope + v_dim)
        o = heads * v_dim * hidden
        # SGLang keeps the fused q_a / kv_a down-projections whole on every rank.
        return q_b + kv_b + o, q_a + kv_a, kv_rank + rope, None, None
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    params = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    return params, 0, 2 * kv_heads * head_dim, kv_heads, head_dim


def _moe_layers(cfg: Mapping[str, Any], layers: int) -> set[int]:
    if not _get(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0):
        return set()
    if "first_k_dense_replace" in cfg:
        freq = int(cfg.get("moe_layer_freq") or 1)
        first = int(cfg["first_k_dense_replace"])
        return {i for i in range(layers) if i >= first and i % freq == 0}
    dense_only = set(cfg.get("mlp_only_layers") or ())
    step = int(cfg.get("decoder_sparse_step") or 1)
    return {i for i in range(layers) if i not in dense_only and (i + 1) % step == 0}


def estimate_weights(raw_cfg: Mapping[str, Any]) -> ModelWeights:
    """Estimate weight bytes per layer and part from config.json alone."""
    cfg = text_config(raw_cfg)
    _check_fields(cfg)
    arch = ",".join(cfg.get("architectures") or raw_cfg.get("architectures") or [str(cfg.get("model_type", "unknown"))])
    hidden = int(_get(cfg, "hidden_size"))
    layers = int(_get(cfg, "num_hidden_layers"))
    heads = int(_get(cfg, "num_attention_heads"))
    vocab = int(_get(cfg, "vocab_size"))
    scheme = quant_scheme(cfg)
    attn_sharded, attn_replicated, kv_values, kv_heads, head_dim = _attention(cfg, hidden, heads)
    moe_layers = _moe_layers(cfg, layers)
    experts = int(_get(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0))
    mixtral_style = "num_local_experts" in cfg
    expert_inter = int(_get(cfg, "moe_intermediate_size", "intermediate_size")) if experts else 0
    if mixtral_style:
        expert_inter = int(_get(cfg, "intermediate_size"))
    dense_inter = int(_get(cfg, "intermediate_size"))
    shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0) or int(cfg.get("n_shared_experts") or 0) * expert_inter

    expert_module = "model.layers.1.block_sparse_moe.experts.0.w2" if mixtral_style else "model.layers.1.mlp.experts.0.down_proj"
    attn_b = scheme.bytes_for("attention", "model.layers.1.self_attn.o_proj")
    dense_b = scheme.bytes_for("dense_mlp", "model.layers.0.mlp.down_proj")
    shared_b = scheme.bytes_for("shared_experts", "model.layers.1.mlp.shared_experts.down_proj")
    expert_b = scheme.bytes_for("routed_experts", expert_module)
    base = scheme.base_bytes

    per_layer: list[LayerBytes] = []
    for index in range(layers):
        sharded = attn_sharded * attn_b
        replicated = attn_replicated * attn_b
        expert_bytes = 0.0
        if index in moe_layers:
            expert_bytes = experts * 3 * hidden * expert_inter * expert_b
            sharded += 3 * hidden * shared_inter * shared_b
            replicated += hidden * experts * base  # router
        else:
            sharded += 3 * hidden * dense_inter * dense_b
        per_layer.append(LayerBytes(sharded, replicated, expert_bytes))
    embed = vocab * hidden * base
    lm_head = 0.0 if cfg.get("tie_word_embeddings") else vocab * hidden * scheme.bytes_for("lm_head", "lm_head")
    notes = ("vision tower not counted",) if "text_config" in raw_cfg else ()
    return ModelWeights(
        architecture=arch,
        layers=tuple(per_layer),
        embed=embed,
        lm_head=lm_head,
        routed_experts=experts or None,
        kv_values_per_token_layer=kv_values,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype_bytes=base,
        source=f"estimate from config.json ({scheme.method})",
        notes=notes,
    )


def model_weights(cfg: Mapping[str, Any], index: Mapping[str, Any] | None = None) -> ModelWeights:
    """Weights from config.json, scaled to the index's exact total_size when there is one."""
    if not isinstance(cfg, Mapping):
        raise ModelConfigError("config.json must hold a JSON object")
    try:
        weights = estimate_weights(cfg)
    except ModelConfigError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError, OverflowError, re.error) as exc:
        # The field checks above cover what real configs hold; anything stranger is still a message.
        raise ModelConfigError(f"config.json cannot be read as a model config ({type(exc).__name__}: {str(exc)[:120]})") from exc
    metadata = (index or {}).get("metadata") if isinstance(index, Mapping) else None
    total = metadata.get("total_size") if isinstance(metadata, Mapping) else None
    if total is None:
        return weights
    if isinstance(total, bool) or not isinstance(total, (int, float)) or not 0 < total < 2**60:
        raise ModelConfigError(f"{INDEX_NAME_HINT} metadata.total_size = {str(total)[:40]!r} must be a positive number of bytes")
    return weights.scaled_to(float(total), "model.safetensors.index.json total_size")


INDEX_NAME_HINT = "model.safetensors.index.json"


def pp_stage_layers(num_layers: int, pp: int) -> list[Sequence[int]]:
    """Layer indices per pipeline stage; the remainder goes to the stages before the last."""
    base, extra = divmod(num_layers, pp)
    sizes = [base] * pp
    for i in range(extra):
        sizes[-2 - i if pp > 1 else 0] += 1
    stages, start = [], 0
    for size in sizes:
        stages.append(range(start, start + size))
        start += size
    return stages
