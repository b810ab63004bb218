"""A model's architecture read from its Hugging Face `config.json` (pure): the open end of the model catalog.

The planner needs the figures models.py cites per catalog entry; for any other model they come from the
checkpoint's own files, read by `python -m stacks plan --model-config` (a local file or directory, or the Hub),
which prints them as the stack file's `models[].architecture` block, so a render never needs the network.

Field names are transformers' (`PretrainedConfig` and the model configs of transformers v4.57:
`num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`, `hidden_size`, `head_dim`,
`max_position_embeddings`, `torch_dtype` (renamed `dtype` in v4.56, both read), `vocab_size`, `text_config`
for the language model of a multimodal checkpoint, `layer_types` for hybrid sliding-window attention, and
`quantization_config.quant_method`). The weight bytes are the checkpoint's `model.safetensors.index.json`
`metadata.total_size`, or the one `model.safetensors` file's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_serving.serving.models import ModelArchitecture

# Bytes per stored parameter, to estimate the parameter count from the weight bytes when no count is given.
# MXFP4 packs two 4-bit values per byte plus a shared scale per 32 (OCP MX spec v1.0): about 0.53 bytes.
_BYTES_PER_PARAMETER = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "fp8": 1.0, "mxfp4": 0.53}
_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "half": "float16",
           "float": "float32"}
# Expert counts under the names the MoE configs use (Mixtral, Qwen2/3-MoE, gpt-oss, DeepSeek, Llama 4, DBRX/Ernie).
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
# Model types whose attention head size is hidden_size / num_attention_heads when config.json leaves head_dim out
# (their transformers config classes default head_dim to None and the model derives it, e.g. LlamaConfig,
# MistralConfig, Qwen2Config). Others default to a fixed size (Gemma3TextConfig head_dim=256, Qwen3Config 128), so a
# missing head_dim is refused rather than guessed.
_DERIVED_HEAD_DIM = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "granite", "olmo2", "phi3"})
# Attention kinds the planner sizes (full; sliding counted as full, conservative; Llama 4's chunked as full, as vLLM's
# default allocator does). Linear attention and state-space layers (Qwen3-Next, Granite-4-H, Nemotron-H, Jamba,
# MiniMax) keep a per-sequence state the planner does not model.
_SIZED_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
_HYBRID_KEYS = ("hybrid_override_pattern", "attn_layer_period", "attn_type_list", "full_attention_interval",
                "linear_num_value_heads", "mamba_d_state", "ssm_state_size")
BY_HAND = "give models[].architecture by hand"


class ModelConfigError(ValueError):
    """A config.json the planner cannot size, with what to give instead."""


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _positive_int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ModelConfigError(f"config.json: {key} is {value!r}; expected a positive integer, or {BY_HAND}")
    return value


def _experts(config: Mapping[str, Any]) -> int:
    counts = []
    for key in _EXPERT_KEYS:
        value = config.get(key)
        # Ernie 4.5 VL gives one count per modality (a list); vLLM takes the list too.
        counts += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int)
                   and not isinstance(v, bool)]
    return max(counts, default=0)


def _quantized_dtype(config: Mapping[str, Any]) -> str | None:
    quantization = config.get("quantization_config")
    if not isinstance(quantization, Mapping):
        return None
    method = str(quantization.get("quant_method", "")).lower()
    if method in ("fp8", "mxfp4"):
        return method
    if method == "compressed-tensors":
        # llm-compressor's FP8 checkpoints (RedHatAI/*-FP8): weights of 8-bit float type in every group.
        groups = quantization.get("config_groups")
        weights = [g.get("weights") if isinstance(g, Mapping) else None
                   for g in groups.values()] if isinstance(groups, Mapping) else []
        if weights and all(isinstance(w, Mapping) and w.get("num_bits") == 8 and w.get("type") == "float"
                           for w in weights):
            return "fp8"
    raise ModelConfigError(f"config.json: quantization_config.quant_method {method or '?'!r} is not one the planner "
                           f"sizes (fp8, mxfp4, compressed-tensors FP8); {BY_HAND}")


def _dtype(config: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    quantized = _quantized_dtype(config)
    if quantized:
        return quantized
    # vLLM reads the root's dtype first and the text config's only without one (vllm/config/model.py, _find_dtype).
    candidates = [c.get(key) for c in (config, text) for key in ("dtype", "torch_dtype")]
    raw = next((c for c in candidates if c is not None), None)
    found = _DTYPES.get(str(raw).removeprefix("torch."))
    if found is None:
        raise ModelConfigError(f"config.json: torch_dtype {raw!r}; expected one of {sorted(_DTYPES)}")
    if found == "float32":
        # vLLM's auto dtype downcasts a float32 checkpoint (vllm/config/model.py, _resolve_auto_dtype): it serves half
        # the bytes it reads, which one weight figure cannot say.
        raise ModelConfigError("config.json: torch_dtype float32: vLLM serves it in bfloat16, half the bytes it reads; "
                               f"{BY_HAND} (nativeDtype bfloat16, weightGib the served size)")
    return found


def architecture_from_config(model_id: str, config: Mapping[str, Any], weight_bytes: int,
                             parameters: int | None = None) -> ModelArchitecture:
    """The sizing facts of `model_id` from its config.json and the checkpoint's weight bytes (`parameters`: the
    count when the checkpoint states it, else estimated from the bytes and the stored type)."""
    text = _text_config(config)
    if "kv_lora_rank" in text:
        # Multi-head latent attention (DeepSeek V2/V3) caches one compressed latent per token, not per KV head:
        # the planner's per-head KV formula would oversize it several times over.
        raise ModelConfigError("config.json: kv_lora_rank (multi-head latent attention) is not sized by the "
                               f"planner's per-head KV cache; {BY_HAND}")
    heads = _positive_int(text, "num_attention_heads")
    hidden = _positive_int(text, "hidden_size")
    head_dim = text.get("head_dim")
    if head_dim is None:
        model_type = text.get("model_type", config.get("model_type"))
        if model_type not in _DERIVED_HEAD_DIM:
            raise ModelConfigError(f"config.json: no head_dim, and model_type {model_type!r} does not derive it from "
                                   f"hidden_size / num_attention_heads; {BY_HAND}")
        head_dim = hidden // heads if hidden % heads == 0 else None
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1:
        raise ModelConfigError(f"config.json: head_dim is {head_dim!r} (hidden_size {hidden}, num_attention_heads "
                               f"{heads}); expected a positive integer, or {BY_HAND}")
    layers = _positive_int(text, "num_hidden_layers")
    kinds = text.get("layer_types")
    unsized = sorted({str(k) for k in kinds} - _SIZED_LAYER_TYPES) if isinstance(kinds, list) else []
    hybrid = [key for key in _HYBRID_KEYS if key in text]
    if unsized or hybrid:
        raise ModelConfigError(f"config.json: {', '.join(unsized or hybrid)} (linear attention or state-space layers) "
                               f"keep a per-sequence state the planner's KV cache does not size; {BY_HAND}")
    sliding = sum(1 for kind in kinds if kind == "sliding_attention") if isinstance(kinds, list) else 0
    dtype = _dtype(config, text)
    if not isinstance(weight_bytes, int) or weight_bytes <= 0:
        raise ModelConfigError(f"the checkpoint's weight bytes are {weight_bytes!r}; expected a positive integer")
    count = parameters if parameters else weight_bytes / _BYTES_PER_PARAMETER[dtype]
    vocab = text.get("vocab_size")
    contexts = _positive_int(text, "max_position_embeddings")
    try:
        return ModelArchitecture(
            model_id=model_id,
            parameters_billion=round(count / 1e9, 2),
            num_layers=layers,
            num_attention_heads=heads,
            num_kv_heads=text.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            hidden_size=hidden,
            native_dtype=dtype,
            weight_bytes=weight_bytes,
            max_context_tokens=contexts,
            is_moe=_experts(text) > 1,
            sliding_window_layers=sliding,
            sliding_window_tokens=text.get("sliding_window") if sliding else None,
            vocab_size=vocab if isinstance(vocab, int) and vocab > 0 else None,
        )
    except ValueError as error:  # ModelArchitecture's own checks (heads vs KV heads, sizes)
        raise ModelConfigError(f"config.json: {error}") from None


def weight_bytes_from_index(index: Mapping[str, Any]) -> int:
    """`metadata.total_size` of a model.safetensors.index.json: the bytes of every tensor as stored."""
    metadata = index.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, Mapping) else None
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        raise ModelConfigError(f"model.safetensors.index.json: metadata.total_size is {total!r}; expected bytes")
    return total


def parameters_from_index(index: Mapping[str, Any]) -> int | None:
    """`metadata.total_parameters`, which recent checkpoints' indexes carry; None when absent."""
    metadata = index.get("metadata")
    count = metadata.get("total_parameters") if isinstance(metadata, Mapping) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


def architecture_block(architecture: ModelArchitecture) -> dict[str, Any]:
    """The stack file's `models[].architecture` for `architecture` (ModelArchitectureArgs, camelCase)."""
    return {
        "parametersBillion": architecture.parameters_billion,
        "numLayers": architecture.num_layers,
        "numAttentionHeads": architecture.num_attention_heads,
        "numKvHeads": architecture.num_kv_heads,
        "headDim": architecture.head_dim,
        "hiddenSize": architecture.hidden_size,
        # Rounded up, so the plan never counts on less than the checkpoint holds.
        "weightGib": -(-architecture.weight_bytes * 100 // 1024**3) / 100,
        "maxContextTokens": architecture.max_context_tokens,
        "nativeDtype": architecture.native_dtype,
        "isMoe": architecture.is_moe,
    }
