import pytest

from sglang_layout.memory import check_memory, memory_fit
from sglang_layout.model_size import estimate_weights
from sglang_layout.schema import parse_layout
from tests.unit.test_model_size import LLAMA3_8B

COMMON = {"mem-fraction-static": 0.88, "context-length": 32768}


def lay(name, **spec):
    return parse_layout(name, spec, common_args=COMMON)


def test_tp8_fits_and_tp4ep2_runs_out_of_memory(kimi_config):
    weights = estimate_weights(kimi_config)
    tp8 = memory_fit(weights, lay("tp8", tp=8), 94.97)
    assert tp8.fits and tp8.usable_per_gpu_gib == pytest.approx(94.97 * 0.88)
    assert 60 < tp8.weights_per_gpu_gib < 80
    tp4ep2 = lay("tp4ep2", tp=4, ep=2)
    fit = memory_fit(weights, tp4ep2, 94.97)
    assert not fit.fits
    [error] = [f for f in check_memory(fit, tp4ep2, 8) if f.severity == "error"]
    assert error.message.startswith("tp4ep2 uses 4 GPUs; weights ~")
    assert "GiB per GPU are usable (94.97 GiB x 0.88)" in error.message
    assert "on 8 GPUs write tp 8, ep 2" in error.fix


def test_ep_does_not_change_weights_per_gpu_but_tp_does(kimi_config):
    weights = estimate_weights(kimi_config)
    ep8 = memory_fit(weights, lay("ep8", tp=8, ep=8), 94.97)
    ep4 = memory_fit(weights, lay("ep4", tp=8, ep=4), 94.97)
    tp4 = memory_fit(weights, lay("tp4", tp=4), 94.97)
    assert ep8.weights_per_gpu_gib == pytest.approx(ep4.weights_per_gpu_gib)
    assert tp4.weights_per_gpu_gib > 1.9 * ep8.weights_per_gpu_gib


def test_mla_kv_is_replicated_per_rank_and_gqa_is_split(kimi_config):
    mla = estimate_weights(kimi_config)
    tp8 = memory_fit(mla, lay("tp8", tp=8), 94.97)
    assert tp8.kv_bytes_per_token == 576 * 2 * 61  # whole latent on every rank, all 61 layers
    fp8 = memory_fit(mla, lay("tp8", tp=8, args={"kv-cache-dtype": "fp8_e4m3"}), 94.97)
    assert fp8.kv_tokens == pytest.approx(2 * tp8.kv_tokens, rel=0.001)
    gqa = estimate_weights(LLAMA3_8B)
    tp1 = memory_fit(gqa, lay("tp1"), 80)
    tp2 = memory_fit(gqa, lay("tp2", tp=2), 80)
    assert tp1.kv_bytes_per_token == 2 * 8 * 128 * 2 * 32
    assert tp2.kv_bytes_per_token == tp1.kv_bytes_per_token / 2


def test_kv_warning_when_running_requests_times_context_do_not_fit(kimi_config):
    weights = estimate_weights(kimi_config)
    tuned = lay("ep8-tuned", tp=8, ep=8, args={"max-running-requests": 256})
    fit = memory_fit(weights, tuned, 94.97)
    [warning] = check_memory(fit, tuned, 8)
    assert warning.rule == "kv-cache" and "256 x context-length 32,768" in warning.message
    tight = lay("tight", tp=8, args={"mem-fraction-static": 0.75})
    [short] = check_memory(memory_fit(weights, tight, 94.97), tight, 8)
    assert "less than one context-length" in short.message


def test_pipeline_puts_the_heaviest_stage_against_the_limit(kimi_config):
    weights = estimate_weights(kimi_config)
    pp8 = memory_fit(weights, lay("pp8", pp=8), 94.97)
    assert pp8.fits
    assert pp8.weights_per_gpu_gib > weights.total / 8 / 1024**3  # 8 of 61 layers plus the embedding
