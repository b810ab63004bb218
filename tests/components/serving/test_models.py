"""Model catalog: every entry is self-consistent, the required checkpoints are present, lookups are
forgiving about aliases and case, and bad architectures are refused at construction.
"""

from __future__ import annotations

import pytest

from llm_serving.serving import models as model_catalog
from llm_serving.serving.models import MODELS, ModelArchitecture, known_model_ids, lookup_model

REQUIRED = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-405B-Instruct",
    "meta-llama/Llama-3.1-405B-Instruct-FP8",
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
    "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8",
    "meta-llama/Llama-3.3-70B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-32B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
]


def _arch(**overrides: object) -> ModelArchitecture:
    fields: dict[str, object] = dict(
        model_id="test/model",
        parameters_billion=1.0,
        num_layers=2,
        num_attention_heads=8,
        num_kv_heads=4,
        head_dim=64,
        hidden_size=512,
        native_dtype="bfloat16",
        weight_bytes=2_000_000_000,
        max_context_tokens=4096,
        is_moe=False,
    )
    fields.update(overrides)
    return ModelArchitecture(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("model_id", REQUIRED)
def test_catalog_holds_every_required_checkpoint_under_its_hub_id(model_id: str) -> None:
    assert MODELS[model_id].model_id == model_id


@pytest.mark.parametrize(
    "model", [m for m in MODELS.values() if m.native_dtype == "bfloat16"], ids=lambda m: m.model_id
)
def test_bf16_weights_are_two_bytes_per_parameter(model: ModelArchitecture) -> None:
    # Each bf16 weight_bytes is a checkpoint total_size (or its recount); parameters_billion is
    # total_size / 2 rounded to 10M, so the two must agree to within that rounding.
    assert model.weight_bytes / 2 / 1e9 == pytest.approx(model.parameters_billion, abs=0.006)


@pytest.mark.parametrize(
    "model_id",
    [m for m in REQUIRED if not m.startswith(("Qwen/Qwen3", "openai/"))],
)
def test_head_dim_is_hidden_over_heads_where_config_has_no_head_dim(model_id: str) -> None:
    # Llama, Qwen2.5 and Mistral configs carry no head_dim: vLLM derives hidden / heads = 128.
    model = MODELS[model_id]
    assert model.head_dim * model.num_attention_heads == model.hidden_size


def test_fp8_checkpoints_keep_bf16_embeddings_so_they_are_more_than_half() -> None:
    # 8B: Linear params 32 x (41,943,040 attn + 176,160,768 mlp) = 6,979,321,856 at 1 byte
    #     the rest 8,030,261,248 - 6,979,321,856 = 1,050,939,392 (embed, lm_head, norms) at 2 bytes
    #     6,979,321,856 + 2 x 1,050,939,392 = 9,081,200,640
    fp8 = MODELS["RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"]
    bf16 = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
    assert fp8.weight_bytes == 6_979_321_856 + 2 * 1_050_939_392 == 9_081_200_640
    assert bf16.weight_bytes / 2 < fp8.weight_bytes < bf16.weight_bytes
    # Architecture is the base model's; only the storage differs.
    assert (fp8.num_layers, fp8.num_kv_heads, fp8.head_dim) == (
        bf16.num_layers,
        bf16.num_kv_heads,
        bf16.head_dim,
    )


def test_fp8_and_mxfp4_checkpoints_run_bf16_activations() -> None:
    assert MODELS["meta-llama/Llama-3.1-405B-Instruct-FP8"].activation_bytes == 2
    assert MODELS["openai/gpt-oss-120b"].activation_bytes == 2
    assert MODELS["Qwen/Qwen3-8B"].activation_bytes == 2


def test_gpt_oss_alternates_sliding_and_full_attention() -> None:
    for model_id in ("openai/gpt-oss-20b", "openai/gpt-oss-120b"):
        model = MODELS[model_id]
        assert model.is_moe
        assert model.sliding_window_layers * 2 == model.num_layers
        assert model.sliding_window_tokens == 128
    # As loaded on H100 ("Model loading took 64.38 GiB"): more than the card's 60.8 GiB checkpoint.
    assert MODELS["openai/gpt-oss-120b"].weight_gib == pytest.approx(64.38, abs=0.001)
    assert MODELS["openai/gpt-oss-20b"].weight_gib == pytest.approx(13.47, abs=0.001)


def test_qwen_instruct_contexts_are_the_config_values_not_the_yarn_ones() -> None:
    assert MODELS["Qwen/Qwen2.5-7B-Instruct"].max_context_tokens == 32_768
    assert MODELS["Qwen/Qwen3-8B"].max_context_tokens == 40_960
    assert MODELS["meta-llama/Llama-3.1-70B-Instruct"].max_context_tokens == 131_072


def test_lookup_finds_exact_ids_aliases_and_other_case() -> None:
    assert lookup_model("meta-llama/Llama-3.1-70B-Instruct") is MODELS["meta-llama/Llama-3.1-70B-Instruct"]
    assert lookup_model("meta-llama/Meta-Llama-3.1-70B-Instruct") is MODELS["meta-llama/Llama-3.1-70B-Instruct"]
    assert (
        lookup_model("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8") is MODELS["RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"]
    )
    assert lookup_model(" qwen/qwen3-8b ") is MODELS["Qwen/Qwen3-8B"]
    assert (
        lookup_model("neuralmagic/meta-llama-3.1-70b-instruct-fp8")
        is MODELS["RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8"]
    )


def test_lookup_returns_none_for_unknown_or_non_string_ids() -> None:
    assert lookup_model("meta-llama/Llama-3.1-70B") is None
    assert lookup_model(None) is None  # type: ignore[arg-type]


def test_known_model_ids_lists_every_entry_once() -> None:
    ids = known_model_ids()
    assert sorted(ids) == sorted(MODELS)
    assert len(set(ids)) == len(ids)
    assert all(target in MODELS for target in model_catalog.ALIASES.values())


def test_rejects_query_heads_that_are_not_a_multiple_of_kv_heads() -> None:
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        _arch(num_attention_heads=6, num_kv_heads=4)


def test_rejects_unknown_native_dtype() -> None:
    with pytest.raises(ValueError, match="native_dtype"):
        _arch(native_dtype="int3")


def test_rejects_more_sliding_layers_than_layers() -> None:
    with pytest.raises(ValueError, match="sliding_window_layers"):
        _arch(sliding_window_layers=3)
