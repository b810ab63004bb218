"""Capacity planner: KV bytes per token, overhead estimate, TP choice and rejections, checked against
hand arithmetic (tables in comments) and against vLLM's own log lines (the issues cited per test).

Length: planner tables, one row per model, GPU and context length.
"""

from __future__ import annotations

import re

import pytest

from llm_serving.gpu.catalog import instance_type_from_spec, lookup_instance_type
from llm_serving.serving import capacity
from llm_serving.serving.capacity import (
    GIB,
    CapacityError,
    GpuSpec,
    available_kv_bytes_per_gpu,
    choose_tensor_parallel_size,
    cold_start_seconds,
    kv_bytes_per_token_per_gpu,
    kv_cache_tokens,
    max_concurrency,
    plan,
    runtime_overhead_bytes,
    startup_probe_budget_seconds,
    weight_bytes_per_gpu,
)
from llm_serving.serving.models import MODELS, ModelArchitecture

LLAMA_8B = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
LLAMA_70B = MODELS["meta-llama/Llama-3.1-70B-Instruct"]
LLAMA_405B = MODELS["meta-llama/Llama-3.1-405B-Instruct"]
LLAMA_405B_FP8 = MODELS["meta-llama/Llama-3.1-405B-Instruct-FP8"]
P5 = lookup_instance_type("p5.48xlarge")
P5_SINGLE = lookup_instance_type("p5.4xlarge")
H100_BYTES = 85_045_477_376  # gpu_catalog: CUDA's total for H100 80GB HBM3 (79.20 GiB)


def _synthetic(model_id: str, **fields: object) -> ModelArchitecture:
    base: dict[str, object] = dict(
        model_id=model_id,
        parameters_billion=8.0,
        num_layers=32,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=4096,
        native_dtype="bfloat16",
        weight_bytes=16_000_000_000,
        max_context_tokens=131_072,
        is_moe=False,
        vocab_size=128_256,
    )
    base.update(fields)
    return ModelArchitecture(**base)  # type: ignore[arg-type]


# Qwen3-14B is not in the catalog; config per its config.json (40 layers, 40 Q / 8 KV heads,
# head_dim 128, hidden 5120, max_position_embeddings 40960) and total_size 29,536,614,400.
QWEN3_14B = _synthetic(
    "Qwen/Qwen3-14B",
    parameters_billion=14.77,
    num_layers=40,
    num_attention_heads=40,
    hidden_size=5120,
    weight_bytes=29_536_614_400,
    max_context_tokens=40_960,
    vocab_size=151_936,
)
ONE_80GIB_GPU = GpuSpec(name="gpu-80gib", memory_bytes=80 * GIB, gpus_per_node=1)


# --- KV bytes per token -----------------------------------------------------------------------------------
# 2 (K,V) x layers x max(1, kv_heads // TP) x head_dim x bytes
# (vllm/v1/kv_cache_interface.py `AttentionSpec.real_page_size_bytes`, vllm/config/model.py `get_num_kv_heads`)
#   Llama-3.1-70B TP1: 2 x 80 x 8 x 128 x 2 = 327,680
#   Llama-3.1-70B TP4: 2 x 80 x 2 x 128 x 2 =  81,920
#   Llama-3.1-70B TP8: 2 x 80 x 1 x 128 x 2 =  40,960
#   Llama-3.1-405B TP8: 2 x 126 x 1 x 128 x 2 = 64,512  (8 KV heads / 8 ranks = 1; the vllm#6746 model)


@pytest.mark.parametrize(("tp", "expected"), [(1, 327_680), (2, 163_840), (4, 81_920), (8, 40_960)])
def test_llama_70b_kv_bytes_per_token_split_over_tensor_parallel_ranks(tp: int, expected: int) -> None:
    assert kv_bytes_per_token_per_gpu(LLAMA_70B, tp, "auto") == expected


def test_llama_405b_at_tp8_keeps_one_kv_head_per_gpu() -> None:
    assert kv_bytes_per_token_per_gpu(LLAMA_405B, 8, "auto") == 2 * 126 * 1 * 128 * 2 == 64_512


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    # 4 KV heads at TP8: 4 // 8 = 0 -> max(1, 0) = 1 head per rank, so TP8 costs as much as TP4.
    #   2 x 32 x 1 x 128 x 2 = 16,384 bytes at both TP4 and TP8
    four_kv_heads = _synthetic("test/four-kv-heads", num_kv_heads=4)
    assert kv_bytes_per_token_per_gpu(four_kv_heads, 8, "auto") == 16_384
    assert kv_bytes_per_token_per_gpu(four_kv_heads, 4, "auto") == 16_384
    assert kv_bytes_per_token_per_gpu(four_kv_heads, 2, "auto") == 32_768


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_fp8_kv_cache_halves_bytes_per_token(dtype: str) -> None:
    assert kv_bytes_per_token_per_gpu(LLAMA_70B, 4, dtype) == 40_960
    assert kv_bytes_per_token_per_gpu(LLAMA_70B, 4, dtype) * 2 == kv_bytes_per_token_per_gpu(LLAMA_70B, 4, "auto")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_explicit_16_bit_kv_dtypes_cost_two_bytes(dtype: str) -> None:
    assert kv_bytes_per_token_per_gpu(LLAMA_8B, 1, dtype) == 131_072


def test_auto_kv_dtype_of_an_fp8_checkpoint_is_bf16() -> None:
    # Meta's FP8 405B keeps bf16 activations, so its KV under "auto" costs the same as the BF16 model's.
    assert kv_bytes_per_token_per_gpu(LLAMA_405B_FP8, 8, "auto") == kv_bytes_per_token_per_gpu(LLAMA_405B, 8, "auto")


def test_rejects_kv_dtypes_the_planner_cannot_size() -> None:
    with pytest.raises(ValueError, match="int4_per_token_head"):
        kv_bytes_per_token_per_gpu(LLAMA_8B, 1, "int4_per_token_head")


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        # 2 x layers x kv_heads x head_dim x 2 at TP1
        ("meta-llama/Llama-3.1-8B-Instruct", 2 * 32 * 8 * 128 * 2),  # 131,072
        ("Qwen/Qwen2.5-7B-Instruct", 2 * 28 * 4 * 128 * 2),  # 57,344
        ("Qwen/Qwen2.5-32B-Instruct", 2 * 64 * 8 * 128 * 2),  # 262,144
        ("Qwen/Qwen3-8B", 2 * 36 * 8 * 128 * 2),  # 147,456
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2 * 32 * 8 * 128 * 2),  # 131,072
        ("openai/gpt-oss-20b", 2 * 24 * 8 * 64 * 2),  # 49,152: all layers as full attention
        ("openai/gpt-oss-120b", 2 * 36 * 8 * 64 * 2),  # 73,728
    ],
)
def test_kv_bytes_per_token_of_catalog_models_at_tp1(model_id: str, expected: int) -> None:
    assert kv_bytes_per_token_per_gpu(MODELS[model_id], 1, "auto") == expected


# --- weights, blocks, concurrency -------------------------------------------------------------------------


def test_weights_split_evenly_over_tp_rounded_up() -> None:
    assert weight_bytes_per_gpu(LLAMA_70B, 4) == 141_107_412_992 // 4 == 35_276_853_248
    assert weight_bytes_per_gpu(_synthetic("test/odd", weight_bytes=10), 4) == 3


def test_kv_cache_tokens_are_whole_blocks_and_never_negative() -> None:
    # 1 GiB / 131,072 B = 8,192 tokens = 512 blocks exactly; one byte less loses a whole block.
    assert kv_cache_tokens(GIB, 131_072) == 8_192
    assert kv_cache_tokens(GIB - 1, 131_072) == 8_176
    assert kv_cache_tokens(-5 * GIB, 131_072) == 0
    assert kv_cache_tokens(GIB, 131_072, block_size=32) == 8_192


def test_max_concurrency_is_kv_tokens_over_max_model_len() -> None:
    assert max_concurrency(42_656, 32_768) == pytest.approx(1.3017578125)


# --- overhead estimate ------------------------------------------------------------------------------------
# Llama-3.1-70B, TP4, 8192 batched tokens, 1024 sampler rows (constants fitted to public V1 logs):
#   base        1.9 GiB                                               = 2,040,109,465
#   sampler     1,024 x 128,256 x 17                                  = 2,232,680,448
#   TP buffers  2.1 GiB                                               = 2,254,857,830
#   cudagraphs  1.5 GiB                                               = 1,610,612,736
#   total                                                             = 8,138,260,479 (7.58 GiB)


def test_overhead_estimate_for_llama_70b_at_tp4() -> None:
    assert runtime_overhead_bytes(LLAMA_70B, 4, 8192) == 8_138_260_479
    # The calibration logs (v0.19) did not subtract CUDA graphs; the pinned v0.33.0 does.
    assert runtime_overhead_bytes(LLAMA_70B, 4, 8192, cuda_graphs_counted=False) == 8_138_260_479 - 1_610_612_736


def test_overhead_activation_grows_linearly_with_batched_tokens() -> None:
    # Past max_num_seqs rows the sampler is flat; past the calibrated 8192 tokens the activation term
    # (8,192 x 8,192 x (16 + 40/4)) grows the estimate.
    step = runtime_overhead_bytes(LLAMA_70B, 4, 16_384) - runtime_overhead_bytes(LLAMA_70B, 4, 8_192)
    assert step == 1_744_830_464


def test_moe_models_get_fused_moe_scratch() -> None:
    dense = _synthetic("test/dense")
    moe = _synthetic("test/moe", is_moe=True)
    assert runtime_overhead_bytes(moe, 1, 8192) - runtime_overhead_bytes(dense, 1, 8192) == 9 * GIB // 10


def test_overhead_is_conservative_against_vllm_log_of_llama_8b_on_h100() -> None:
    # vllm#19996 (V1): Llama-3.1-8B (+ an EAGLE head) on H100 at util 0.90 had
    # "Available KV cache memory: 51.63 GiB". Our estimate for the plain model must not promise more.
    available = available_kv_bytes_per_gpu(H100_BYTES, 0.90, LLAMA_8B, 1, 8192)
    assert available / GIB == pytest.approx(50.85, abs=0.01)
    assert available < 51.63 * GIB


def test_405b_fp8_at_tp8_against_the_only_public_log_a_v0_one() -> None:
    # vllm#6746 (the V0 engine of 0.5.x): 8 x H100, TP8, util 0.90 -> "KV cache (79392)" tokens,
    # and vLLM refused max_model_len 131072. The V1 fit plans more (116,240 tokens): V0's profiler
    # reported ~1.2 GiB more overhead than this fit gives at TP8 and hidden 16,384, and no V1 log of
    # a 405B is public. docs/capacity-planner.md says to pin such a plan with --available-kv-gib.
    result = plan(LLAMA_405B_FP8, P5, 32_768, tp=8, gpu_memory_utilization=0.90)
    assert result.kv_cache_tokens == 116_240
    assert result.notes[0].startswith(
        "KV budget is extrapolated beyond the calibration logs (TP <= 4, hidden size <= 8,192)"
    )
    assert plan(LLAMA_70B, P5, 16_384, tp=4).notes[0].startswith("KV budget is a conservative estimate")
    with pytest.raises(CapacityError, match="needs 131,072"):
        plan(LLAMA_405B_FP8, P5, 131_072, tp=8, gpu_memory_utilization=0.90)


# --- measured KV budgets reproduce vLLM's log lines -------------------------------------------------------


def test_available_kv_gib_reproduces_vllm_log_for_qwen3_14b() -> None:
    # LMCache/LMCache#1739: "Available KV cache memory: 6.51 GiB", "GPU KV cache size:
    # 42,656 tokens", "Maximum concurrency for 32,768 tokens per request: 1.30x".
    #   6.51 GiB = 6,990,059,274 B; per token 2 x 40 x 8 x 128 x 2 = 163,840 B
    #   6,990,059,274 // (163,840 x 16) = 2,666 blocks -> 42,656 tokens; 42,656 / 32,768 = 1.30
    result = plan(QWEN3_14B, ONE_80GIB_GPU, 32_768, tp=1, available_kv_gib=6.51)
    assert result.kv_bytes_per_token_per_gpu == 163_840
    assert result.kv_cache_tokens == 42_656
    assert result.to_json()["max_concurrency"] == 1.30
    assert result.kv_source == "measured"
    assert result.runtime_overhead_gib_per_gpu is None


def test_available_kv_gib_reproduces_vllm_log_with_a_draft_layer() -> None:
    # vllm#19996: Llama-3.1-8B + EAGLE (one extra KV layer -> 33), 51.63 GiB available,
    # "410,128 tokens", "3.13x" at 131,072.
    #   per token 2 x 33 x 8 x 128 x 2 = 135,168 B; int(51.63 x 2^30) = 55,437,290,373 B
    #   55,437,290,373 // (135,168 x 16) = 25,633 blocks -> 410,128 tokens; / 131,072 = 3.13
    with_draft = _synthetic("test/llama-8b-eagle", num_layers=33, weight_bytes=LLAMA_8B.weight_bytes)
    gpu = GpuSpec.from_instance_type(P5_SINGLE)
    result = plan(with_draft, gpu, 131_072, tp=1, gpu_memory_utilization=0.90, available_kv_gib=51.63)
    assert result.kv_cache_tokens == 410_128
    assert round(result.max_concurrency, 2) == 3.13


def test_fp8_kv_doubles_tokens_for_the_same_budget() -> None:
    # 1.5 GiB / 131,072 B = 12,288 tokens (bf16); / 65,536 B = 24,576 tokens (fp8)
    bf16 = plan(LLAMA_8B, P5_SINGLE, 8_192, tp=1, available_kv_gib=1.5)
    fp8 = plan(LLAMA_8B, P5_SINGLE, 8_192, tp=1, available_kv_gib=1.5, kv_cache_dtype="fp8")
    assert (bf16.kv_cache_tokens, fp8.kv_cache_tokens) == (12_288, 24_576)
    assert any("fp8 KV cache" in note for note in fp8.notes)


# --- the production case ----------------------------------------------------------------------------------
# Llama-3.1-70B-Instruct on p5.48xlarge (8 x H100, 85,045,477,376 B each), --max-model-len 16384, util 0.92:
#   usable per GPU  int(85,045,477,376 x 0.92)            = 78,241,839,185 B (72.87 GiB)
#   overhead (TP > 1)  base 2,040,109,465 + sampler 1,024 x 128,256 x 17 = 2,232,680,448
#                      + TP buffers 2,254,857,830 + CUDA graphs 1,610,612,736  = 8,138,260,479 B
#   TP2  weights 70,553,706,496 + overhead 8,138,260,479  -> -450,127,790 B: no room for KV
#   TP4  weights 35,276,853,248 + overhead 8,138,260,479  -> 34,826,725,458 B (32.43 GiB)
#        34,826,725,458 // (81,920 x 16) = 26,570 blocks   -> 425,120 tokens
#        425,120 / 16,384                                  = 25.95 concurrent full-length requests
#   cold start  141,107,412,992 B / (125 x 2^20 B/s) = 1,076.6 s + 180 s engine + 60 s graphs -> 1,317 s
#   startup budget  1,317 x 2 = 2,634 -> whole 10 s periods -> 2,640 s


def test_prod_plan_llama_70b_on_p5_picks_tp4_like_the_seed() -> None:
    result = plan(LLAMA_70B, P5, 16_384, tp="auto", gpu_memory_utilization=0.92)
    assert result.tensor_parallel_size == 4
    assert result.weights_gib_per_gpu == pytest.approx(32.854, abs=0.001)
    assert result.kv_bytes_per_token_per_gpu == 81_920
    assert result.available_kv_gib_per_gpu == pytest.approx(32.435, abs=0.001)
    assert result.kv_cache_tokens == 425_120
    assert result.max_concurrency == pytest.approx(25.9473, abs=0.0001)
    assert result.cold_start_seconds == 1_317
    assert result.startup_budget_seconds == 2_640
    assert (result.gpus_per_replica, result.replicas_per_node) == (4, 2)


# The keys issue #4 promises in `python -m stacks plan --json`.
AGREED_JSON_KEYS = {
    "tensor_parallel_size",
    "weights_gib_per_gpu",
    "kv_bytes_per_token_per_gpu",
    "available_kv_gib_per_gpu",
    "kv_cache_tokens",
    "max_concurrency",
    "startup_budget_seconds",
}


def test_prod_plan_json_has_the_agreed_keys() -> None:
    data = plan(LLAMA_70B, P5, 16_384).to_json()
    assert AGREED_JSON_KEYS <= set(data)
    assert data["max_concurrency"] == 25.95
    assert data["available_kv_gib_per_gpu"] == 32.43
    assert all(key == key.lower() for key in data)


def test_tp2_for_llama_70b_on_h100_has_no_room_for_kv() -> None:
    with pytest.raises(CapacityError, match=r"no room for a KV cache: 72\.87 GiB usable - 65\.71 GiB weights"):
        plan(LLAMA_70B, P5, 16_384, tp=2)


def test_auto_tp_grows_until_the_target_concurrency_fits() -> None:
    # TP4 holds 25.95 requests of 16,384 tokens; 30 needs TP8:
    #   TP8 usable 78,241,839,185 - weights 17,638,426,624 - overhead 8,138,260,479
    #   = 52,465,152,082 B -> // (40,960 x 16) = 80,055 blocks -> 1,280,880 tokens = 78.2 requests
    assert plan(LLAMA_70B, P5, 16_384, target_concurrency=25).tensor_parallel_size == 4
    result = plan(LLAMA_70B, P5, 16_384, target_concurrency=30)
    assert result.tensor_parallel_size == 8
    assert result.kv_cache_tokens == 1_280_880


def test_explicit_tp_below_target_concurrency_is_rejected_with_numbers() -> None:
    with pytest.raises(CapacityError, match="KV cache holds 425,120 tokens but 30 requests .* need 491,520"):
        plan(LLAMA_70B, P5, 16_384, tp=4, target_concurrency=30)


# --- rejections -------------------------------------------------------------------------------------------


def test_rejects_405b_bf16_on_one_80gb_gpu() -> None:
    # 811,706,777,600 B = 755.96 GiB of weights vs 79.20 GiB x 0.92 = 72.87 GiB
    with pytest.raises(CapacityError) as error:
        plan(LLAMA_405B, P5_SINGLE, 8_192, tp=1)
    message = str(error.value)
    assert "755.96 GiB of weights per GPU" in message and "72.87 GiB" in message
    assert "\n" not in message


def test_auto_tp_explains_every_size_when_405b_bf16_cannot_fit_a_p5() -> None:
    # 755.96 / 8 = 94.50 GiB per GPU even at TP8: one node of H100s cannot hold it.
    with pytest.raises(CapacityError) as error:
        choose_tensor_parallel_size(LLAMA_405B, H100_BYTES, 8, 16_384)
    message = str(error.value)
    for reason in ("TP1: weights 755.96 GiB", "TP2: weights 377.98 GiB", "TP4: weights 188.99 GiB"):
        assert reason in message
    assert "TP8: weights 94.50 GiB/GPU > 72.87 GiB usable" in message


def test_rejects_a_kv_cache_that_cannot_hold_one_request() -> None:
    # 1.5 GiB / 131,072 B = 12,288 tokens < 16,384
    with pytest.raises(CapacityError) as error:
        plan(LLAMA_8B, P5_SINGLE, 16_384, tp=1, available_kv_gib=1.5)
    assert str(error.value) == (
        "KV cache holds 12,288 tokens but one request at --max-model-len 16384 needs 16,384; lower "
        "--max-model-len, raise --tensor-parallel-size, or use --kv-cache-dtype fp8"
    )


def test_one_request_needs_whole_blocks() -> None:
    # 16,385 tokens occupy 1,025 blocks = 16,400 tokens; 16,384 tokens of KV are not enough.
    with pytest.raises(CapacityError, match="needs 16,400"):
        plan(LLAMA_8B, P5_SINGLE, 16_385, tp=1, available_kv_gib=2.0)


def test_rejects_max_model_len_beyond_the_model_context() -> None:
    with pytest.raises(CapacityError, match="exceeds Qwen/Qwen2.5-7B-Instruct's context of 32768"):
        plan(MODELS["Qwen/Qwen2.5-7B-Instruct"], P5, 65_536)


@pytest.mark.parametrize("util", [0, -0.1, 0.99, 1.0, 1.5])
def test_rejects_gpu_memory_utilization_outside_zero_to_098(util: float) -> None:
    with pytest.raises(CapacityError, match=f"--gpu-memory-utilization {util} must be above 0"):
        plan(LLAMA_8B, P5, 8_192, gpu_memory_utilization=util)


def test_accepts_gpu_memory_utilization_at_the_098_ceiling() -> None:
    assert plan(LLAMA_8B, P5, 8_192, gpu_memory_utilization=0.98).tensor_parallel_size == 1


def test_rejects_tp_outside_1_2_4_8() -> None:
    with pytest.raises(CapacityError, match="--tensor-parallel-size 3 is not one of 1, 2, 4, 8"):
        plan(LLAMA_70B, P5, 16_384, tp=3)


def test_rejects_tp_that_does_not_divide_node_gpus() -> None:
    with pytest.raises(CapacityError, match="--tensor-parallel-size 2 does not divide the 1 GPU"):
        plan(LLAMA_8B, P5_SINGLE, 8_192, tp=2)


def test_rejects_tp_that_does_not_divide_attention_heads() -> None:
    # Qwen2.5-7B has 28 query heads; vLLM refuses TP8.
    with pytest.raises(CapacityError, match="28 attention heads, which --tensor-parallel-size 8 does not divide"):
        plan(MODELS["Qwen/Qwen2.5-7B-Instruct"], P5, 32_768, tp=8)


def test_rejects_auto_tp_with_a_measured_kv_budget() -> None:
    with pytest.raises(CapacityError, match="give that --tensor-parallel-size"):
        plan(LLAMA_70B, P5, 16_384, available_kv_gib=30.0)


def test_unknown_kv_dtype_is_a_capacity_error_in_plan() -> None:
    with pytest.raises(CapacityError, match="not one the planner can size"):
        plan(LLAMA_8B, P5, 8_192, kv_cache_dtype="nvfp4")


def test_plan_accepts_a_model_id_and_rejects_unknown_ones() -> None:
    assert plan("meta-llama/Llama-3.1-70B-Instruct", P5, 16_384).tensor_parallel_size == 4
    with pytest.raises(CapacityError, match="unknown model"):
        plan("example/not-a-model", P5, 16_384)


# --- notes and defaults -----------------------------------------------------------------------------------


def test_gpt_oss_plan_says_sliding_window_layers_are_sized_as_full_attention() -> None:
    result = plan(MODELS["openai/gpt-oss-120b"], P5, 32_768, tp=2)
    assert any("18 of 36 layers use a 128-token sliding window" in note for note in result.notes)


def test_fp8_checkpoint_on_a_gpu_without_fp8_is_flagged() -> None:
    a100 = lookup_instance_type("p4de.24xlarge")
    result = plan(MODELS["RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"], a100, 8_192, tp=1)
    assert any("no FP8 compute" in note for note in result.notes)


def test_fp8_support_of_a_gpu_described_only_in_config_is_unknown() -> None:
    custom = instance_type_from_spec(
        "g9.xlarge", gpu_count=1, gpu_memory_gib=96.0, product_label="NVIDIA-X", vcpus=8, memory_gib=64
    )
    assert GpuSpec.from_instance_type(custom).supports_fp8 is None
    result = plan(MODELS["RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"], custom, 8_192, tp=1)
    assert not any("FP8 compute" in note for note in result.notes)


def test_sampler_rows_follow_vllm_max_num_seqs_defaults() -> None:
    # vllm/engine/arg_utils.py `get_batch_defaults` @ 99d7eb5d: 1024 on >= 70 GiB GPUs except A100, else 256;
    # never above the batch budget.
    assert plan(LLAMA_8B, P5, 8_192).max_num_seqs == 1024
    assert plan(LLAMA_8B, lookup_instance_type("p4de.24xlarge"), 8_192).max_num_seqs == 256
    assert plan(LLAMA_8B, lookup_instance_type("g6e.xlarge"), 8_192).max_num_seqs == 256
    assert plan(LLAMA_8B, P5, 8_192, max_num_batched_tokens=512).max_num_seqs == 512


def test_gpu_spec_from_instance_type_copies_the_catalog_figures() -> None:
    spec = GpuSpec.from_instance_type(P5)
    assert spec == GpuSpec(name="p5.48xlarge", memory_bytes=H100_BYTES, gpus_per_node=8, supports_fp8=True,
                           efa_interfaces=P5.efa_interfaces)


# --- cold start and probe budget --------------------------------------------------------------------------


def test_cold_start_reads_all_weights_then_adds_engine_and_graph_time() -> None:
    # 141,107,412,992 B / 131,072,000 B/s = 1,076.56 s; + 180 + 60 = 1,316.56 -> 1,317
    assert cold_start_seconds(141_107_412_992, 125 * 1024**2, 180, 60) == 1_317
    # At gp3's 1,000 MiB/s maximum: 134.57 + 240 -> 375
    assert cold_start_seconds(141_107_412_992, 1000 * 1024**2, 180, 60) == 375


def test_cold_start_rejects_a_non_positive_read_speed() -> None:
    with pytest.raises(ValueError, match="storage read speed"):
        cold_start_seconds(1, 0, 0, 0)


@pytest.mark.parametrize(
    ("cold", "budget"),
    [
        (1_317, 2_640),  # x2 = 2,634 -> next whole 10 s period
        (375, 750),  # x2
        (100, 600),  # floor: 10 minutes
        (301, 610),  # x2 = 602 -> 610
    ],
)
def test_startup_budget_doubles_cold_start_with_a_ten_minute_floor(cold: int, budget: int) -> None:
    assert startup_probe_budget_seconds(cold) == budget


def test_startup_budget_rounds_to_the_probe_period() -> None:
    assert startup_probe_budget_seconds(1_000, period_seconds=15) == 2_010
    assert startup_probe_budget_seconds(1_000, safety_factor=1.5, minimum_seconds=0) == 1_500


def test_storage_speed_flows_into_the_plan_budget() -> None:
    fast = plan(LLAMA_70B, P5, 16_384, storage_read_mib_per_second=1000)
    assert (fast.cold_start_seconds, fast.startup_budget_seconds) == (375, 750)
    assert capacity.DEFAULT_STORAGE_READ_MIB_PER_SECOND == 125.0


def test_enforce_eager_frees_the_cuda_graph_memory_and_capture_time() -> None:
    # Prod's TP4 plan without graphs: 34,826,725,458 + 1,610,612,736 B = 36,437,338,194 B
    #   // (81,920 x 16) = 27,799 blocks -> 444,784 tokens; cold start 1,317 - 60 s capture = 1,257 s.
    graphs = plan(LLAMA_70B, P5, 16_384, tp=4)
    eager = plan(LLAMA_70B, P5, 16_384, tp=4, enforce_eager=True)
    assert (graphs.kv_cache_tokens, eager.kv_cache_tokens) == (425_120, 444_784)
    assert (graphs.cold_start_seconds, eager.cold_start_seconds) == (1_317, 1_257)
    assert eager.notes[-1] == (
        "--enforce-eager: no CUDA graphs; decode steps are slower than the latency estimate assumes"
    )


def test_speculative_decoding_is_named_as_unmodelled() -> None:
    result = plan(LLAMA_70B, P5, 16_384, tp=4, speculative_decoding=True)
    assert result.kv_cache_tokens == 425_120
    assert result.notes[-1].startswith(
        "speculative decoding: the draft model's weights and KV layers are not in this plan"
    )


def test_llama_70b_bf16_fits_tp2_with_a_short_context_as_widely_run() -> None:
    # usable int(85,045,477,376 x 0.95) = 80,793,203,507; weights 70,553,706,496; overhead at 256 sequences
    # 2,040,109,465 + 256 x 128,256 x 17 + 2,254,857,830 + 1,610,612,736 = 6,463,750,143
    #   -> 3,775,746,868 B // (163,840 x 16) = 1,440 blocks -> 23,040 tokens = 2.81 requests of 8,192.
    result = plan(LLAMA_70B, P5, 8_192, tp=2, gpu_memory_utilization=0.95, max_num_seqs=256)
    assert result.kv_cache_tokens == 23_040
    assert round(result.max_concurrency, 2) == 2.81


# --- pipeline parallelism across nodes --------------------------------------------------------------------
# Llama-3.1-405B BF16 (126 layers, 8 KV heads, vocab 128,256 x hidden 16,384) on p5.48xlarge at util 0.92:
#   no TP on one node fits (TP8: 94.50 GiB/GPU of weights > 72.87 GiB usable)
#   TP8 x PP2: stage = (W - 2 x embedding) / 2 + embedding = W / 2 -> / 8 = 50,731,673,600 B/GPU (47.25 GiB)
#   usable 78,241,839,185 - 50,731,673,600 - overhead 8,138,260,479 = 19,371,905,106 B
#   KV per token per GPU: 2 x (126 / 2) x 1 x 128 x 2 = 32,256 B -> // (32,256 x 16) = 37,535 blocks
#   -> 600,560 tokens = 36.66 requests of 16,384
#   cold start: each stage's pod reads the whole 811,706,777,600 B checkpoint (vLLM keeps every file on
#   every stage) at 125 MiB/s + 180 + 60 -> 6,433 s


def test_a_model_larger_than_a_node_spreads_as_tp_per_node_and_pp_across_nodes() -> None:
    result = plan(LLAMA_405B, P5, 16_384, pp="auto", max_nodes_per_replica=4)
    assert (result.tensor_parallel_size, result.pipeline_parallel_size) == (8, 2)
    assert (result.gpus_per_replica, result.nodes_per_replica, result.replicas_per_node) == (16, 2, 0)
    assert result.weights_gib_per_gpu == pytest.approx(47.2476, abs=0.0001)
    assert result.kv_bytes_per_token_per_gpu == 32_256
    assert result.kv_cache_tokens == 600_560
    assert result.cold_start_seconds == 6_433
    assert result.to_json()["pipeline_parallel_size"] == 2
    assert result.notes[-2].startswith("2 pipeline stages of 8 GPUs, one node each")
    assert result.notes[-1] == ("each of the 2 stages' pods reads the whole checkpoint, not its stage's share: "
                                "the weights term is the checkpoint at the per-pod read speed")
    # The same plan, asked for explicitly.
    assert plan(LLAMA_405B, P5, 16_384, tp=8, pp=2).kv_cache_tokens == 600_560


def test_the_end_stages_carry_the_embedding_and_lm_head() -> None:
    # 3 stages: (W - 2E) / 3 + E per stage, more than W / 3.
    from llm_serving.serving.capacity import embedding_bytes, weight_bytes_per_gpu

    embedding = embedding_bytes(LLAMA_405B)
    assert embedding == 128_256 * 16_384 * 2
    stage = -(-(LLAMA_405B.weight_bytes - 2 * embedding) // 3) + embedding
    assert weight_bytes_per_gpu(LLAMA_405B, 8, 3) == -(-stage // 8)
    assert weight_bytes_per_gpu(LLAMA_405B, 8, 3) > LLAMA_405B.weight_bytes / 24


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tp": 8, "pp": 4}, "has 126 layers, which --pipeline-parallel-size 4 does not divide"),
    ({"tp": 4, "pp": 2}, "each stage is one whole node: --tensor-parallel-size must be 8, not 4"),
    ({"tp": 8, "pp": 3, "max_nodes_per_replica": 2}, "needs 3 nodes per replica, more than the 2 allowed"),
    ({}, "or more nodes per replica (--max-nodes-per-replica)"),
    ({"pp": "auto", "max_nodes_per_replica": 1}, "TP8: weights 94.50 GiB/GPU > 72.87 GiB usable"),
])
def test_pipeline_plans_that_cannot_work_are_refused(kwargs, message) -> None:
    with pytest.raises(CapacityError, match=re.escape(message)):
        plan(LLAMA_405B, P5, 16_384, **kwargs)
