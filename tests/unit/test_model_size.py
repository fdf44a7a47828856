import pytest

from sglang_layout.model_size import GIB, ModelConfigError, estimate_weights, model_weights, pp_stage_layers, quant_scheme

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "torch_dtype": "bfloat16",
}
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "num_experts": 128,
    "moe_intermediate_size": 768,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "torch_dtype": "bfloat16",
}
DEEPSEEK_V3_FP8 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "first_k_dense_replace": 3,
    "vocab_size": 129280,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
}


def params_b(weights, bytes_per_param=2.0):
    return weights.total / bytes_per_param / 1e9


@pytest.mark.parametrize(("config", "billions"), [(LLAMA3_8B, 8.03), (MIXTRAL_8X7B, 46.7), (QWEN3_30B_A3B, 30.5)])
def test_bf16_parameter_counts_match_published_sizes(config, billions):
    assert params_b(estimate_weights(config)) == pytest.approx(billions, rel=0.02)


def test_deepseek_v3_fp8_with_block_scales():
    weights = estimate_weights(DEEPSEEK_V3_FP8)
    # 671B parameters, almost all in fp8 (1 byte) plus one fp32 scale per 128x128 block.
    assert weights.total / 1e9 == pytest.approx(671 * 1.0 + 2, rel=0.03)
    assert weights.routed_experts == 256
    assert sum(1 for layer in weights.layers if layer.experts) == 58


def test_kimi_int4_experts_with_group_scales(kimi_config):
    weights = estimate_weights(kimi_config)
    expert_params = 60 * 384 * 3 * 7168 * 2048
    assert sum(layer.experts for layer in weights.layers) == pytest.approx(expert_params * (0.5 + 2 / 32))
    # Attention, shared experts and the dense layer are ignored by the quantizer: bf16.
    assert weights.layers[0].experts == 0
    assert weights.layers[0].sharded == pytest.approx(weights.layers[2].sharded - 3 * 7168 * 2048 * 2 + 3 * 7168 * 18432 * 2)
    assert 520 < weights.total / GIB < 600  # "well over 4 x 95 GiB"
    assert weights.kv_heads is None and weights.kv_values_per_token_layer == 576


def test_quant_schemes_price_a_weight():
    awq = quant_scheme(
        {"hidden_size": 4096, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}}
    )
    assert awq.quant_bytes == pytest.approx(0.5 + (2 + 0.5) / 128)
    gptq = quant_scheme({"hidden_size": 4096, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}})
    assert gptq.quant_bytes == pytest.approx(0.5 + (2 + 0.5) / 128)
    fp8 = quant_scheme({"quantization_config": {"quant_method": "fp8"}})
    assert fp8.quant_bytes == 1.0
    assert quant_scheme({"torch_dtype": "float32"}).base_bytes == 4.0
    assert awq.bytes_for("routed_experts", "model.layers.1.mlp.experts.0.down_proj") < 1
    assert awq.bytes_for("embed", "model.embed_tokens") == 2.0


def test_awq_quantizes_a_dense_model_to_about_a_third():
    awq = {
        **LLAMA3_8B,
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": None},
    }
    assert estimate_weights(awq).total / estimate_weights(LLAMA3_8B).total == pytest.approx(0.36, abs=0.03)


def test_unknown_quantization_and_missing_keys_are_explained():
    with pytest.raises(ModelConfigError, match=r"quant_method 'mxfp4'.*index\.json"):
        estimate_weights({**LLAMA3_8B, "quantization_config": {"quant_method": "mxfp4"}})
    broken = dict(LLAMA3_8B)
    del broken["hidden_size"]
    with pytest.raises(ModelConfigError, match="no hidden_size"):
        estimate_weights(broken)


def test_index_total_size_wins_and_keeps_proportions(kimi_config):
    estimate = estimate_weights(kimi_config)
    exact = model_weights(kimi_config, {"metadata": {"total_size": 594 * 10**9}})
    assert exact.total == pytest.approx(594e9)
    assert exact.layers[5].experts / exact.total == pytest.approx(estimate.layers[5].experts / estimate.total)
    assert "index" in exact.source


def test_multimodal_text_config_is_used(kimi_config):
    nested = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {k: v for k, v in kimi_config.items() if k != "quantization_config"},
        "quantization_config": kimi_config["quantization_config"],
    }
    assert estimate_weights(nested).total == pytest.approx(estimate_weights(kimi_config).total)


def test_pipeline_stages_cover_every_layer_once():
    stages = pp_stage_layers(61, 8)
    assert sorted(i for stage in stages for i in stage) == list(range(61))
    assert sorted(len(stage) for stage in stages) == [7, 7, 7, 8, 8, 8, 8, 8]
    assert [len(s) for s in pp_stage_layers(10, 1)] == [10]
