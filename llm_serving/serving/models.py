"""Architectures of the models this program plans and serves, keyed by Hugging Face repository id.
Only the figures KV-cache, weight and tensor-parallel sizing need, each cited next to its entry, so
the capacity planner and the vLLM flags derive from one place instead of retyped numbers.

Length: a data table, one entry per model with the source of each figure beside it; splitting the
catalog would separate figures from their citations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# Sources cited next to the entries below (facts only; nothing is copied from them):
#   [CFG]    the repository's config.json on the Hugging Face Hub
#            (https://huggingface.co/<id>/blob/main/config.json): num_hidden_layers,
#            num_attention_heads, num_key_value_heads, hidden_size, head_dim (else hidden/heads),
#            max_position_embeddings, torch_dtype, vocab_size. Read through stored copies of those
#            files; where only an unattributed excerpt was found it says so.
#   [IDX]    the repository's model.safetensors.index.json `metadata.total_size` (bytes of all
#            tensors as stored). Every [IDX] figure below also equals the parameter count recomputed
#            from [CFG] times bytes per parameter, to the byte — an independent check of the config.
#   [DERIVED] weight bytes recomputed from [CFG] and the quantization recipe when no total_size was
#            found; marked UNVERIFIED because the checkpoint's own figure was not seen.
#
# max_context_tokens is max_position_embeddings: the --max-model-len vLLM accepts without overrides.
#
# Activation dtype: vLLM runs FP8 and MXFP4 checkpoints with bf16 activations (their config.json
# keeps torch_dtype bfloat16), so `--kv-cache-dtype auto` stores bf16 KV for them as well
# (see ACTIVATION_BYTES).

# Bytes per element of the activations, hence of the KV cache under --kv-cache-dtype auto.
ACTIVATION_BYTES: Mapping[str, int] = MappingProxyType(
    {"bfloat16": 2, "float16": 2, "fp8": 2, "mxfp4": 2, "float32": 4}
)


@dataclass(frozen=True)
class ModelArchitecture:
    """What sizing needs to know about one checkpoint, as served by vLLM."""

    model_id: str  # Hugging Face repository id, as passed to `vllm serve`
    parameters_billion: float  # total parameters (all experts for MoE), from the checkpoint
    num_layers: int  # transformer layers holding a KV cache
    num_attention_heads: int  # query heads; vLLM needs TP to divide this
    num_kv_heads: int  # key/value heads (GQA); replicated when TP exceeds it
    head_dim: int
    hidden_size: int
    native_dtype: str  # how the weights are stored: "bfloat16", "fp8", "mxfp4", ...
    weight_bytes: int  # bytes of all weights as served (the checkpoint's tensors)
    max_context_tokens: int  # max_position_embeddings from config.json
    is_moe: bool
    # Layers that attend over a sliding window only (gpt-oss alternates sliding/full attention).
    # The capacity planner sizes KV as if every layer were full attention: vLLM's hybrid allocator
    # gives window layers less, so real capacity is higher. Conservative by design.
    sliding_window_layers: int = 0
    sliding_window_tokens: int | None = None
    vocab_size: int | None = None  # logits width; the planner assumes a large vocab when unknown

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_attention_heads", "num_kv_heads", "head_dim", "hidden_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{self.model_id}: {name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.model_id}: num_attention_heads ({self.num_attention_heads}) must be a multiple "
                f"of num_kv_heads ({self.num_kv_heads})"
            )
        if self.native_dtype not in ACTIVATION_BYTES:
            raise ValueError(
                f"{self.model_id}: native_dtype must be one of {sorted(ACTIVATION_BYTES)}, got {self.native_dtype!r}"
            )
        if self.weight_bytes <= 0 or self.max_context_tokens <= 0 or self.parameters_billion <= 0:
            raise ValueError(f"{self.model_id}: weight_bytes, max_context_tokens and parameters must be > 0")
        if not 0 <= self.sliding_window_layers <= self.num_layers:
            raise ValueError(f"{self.model_id}: sliding_window_layers must be within 0..num_layers")

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element; also the KV element size under `--kv-cache-dtype auto`."""
        return ACTIVATION_BYTES[self.native_dtype]

    @property
    def weight_gib(self) -> float:
        return self.weight_bytes / 1024**3


# --- Llama 3.1 / 3.3 ----------------------------------------------------------------------------------
# Shared Llama-3.1 figures: vocab 128256, untied embeddings, max_position_embeddings 131072 with llama3
# rope scaling, torch_dtype bfloat16 ([CFG], stored copy of Llama-3.1-8B config.json in
# citsjtu2020/LLM-Prof sglang/Model_Config.md; oumi configs/recipes/llama3_1/README.md lists the same
# layers/heads/KV heads for 8B/70B/405B). head_dim = hidden/heads = 128 for all three sizes.

LLAMA_3_1_8B = ModelArchitecture(
    model_id="meta-llama/Llama-3.1-8B-Instruct",
    parameters_billion=8.03,  # 8,030,261,248 = total_size / 2
    num_layers=32,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    native_dtype="bfloat16",
    # [IDX] 16,060,522,496 (stored index excerpts, e.g. the transformers docs' 8B example). The
    # Instruct repo has the architecture of the base repo whose config was read.
    weight_bytes=16_060_522_496,
    max_context_tokens=131_072,
    is_moe=False,
    vocab_size=128_256,
)

LLAMA_3_1_70B = ModelArchitecture(
    model_id="meta-llama/Llama-3.1-70B-Instruct",
    parameters_billion=70.55,  # 70,553,706,496
    num_layers=80,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=8192,
    native_dtype="bfloat16",
    # [CFG] 80 layers, 64 heads, 8 KV heads, hidden 8192, max_position_embeddings 131072 (unattributed
    # stored copy of the 3.1-70B config); [IDX] 141,107,412,992 recorded together with
    # torch_dtype bfloat16 for a local copy of meta/Llama-3.1-70B-Instruct (unattributed test fixture).
    weight_bytes=141_107_412_992,
    max_context_tokens=131_072,
    is_moe=False,
    vocab_size=128_256,
)

LLAMA_3_1_405B = ModelArchitecture(
    model_id="meta-llama/Llama-3.1-405B-Instruct",
    parameters_billion=405.85,  # 405,853,388,800 recomputed from [CFG]
    num_layers=126,
    num_attention_heads=128,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=16384,  # intermediate_size 53248
    native_dtype="bfloat16",
    # [CFG] 126 layers, 128 heads, 8 KV heads, hidden 16384 (several stored copies of the 405B config).
    # UNVERIFIED [DERIVED]: 405,853,388,800 params x 2 bytes; the checkpoint's total_size was not seen.
    weight_bytes=811_706_777_600,
    max_context_tokens=131_072,
    is_moe=False,
    vocab_size=128_256,
)

LLAMA_3_3_70B = ModelArchitecture(
    model_id="meta-llama/Llama-3.3-70B-Instruct",
    parameters_billion=70.55,
    num_layers=80,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=8192,
    native_dtype="bfloat16",
    # [CFG] same architecture as 3.1-70B: 80 layers, 64 heads, 8 KV heads, hidden 8192, intermediate
    # 28672, max_position_embeddings 131072 (stored configs citing
    # huggingface.co/meta-llama/Llama-3.3-70B-Instruct/blob/main/config.json, e.g. litgpt's
    # config.py entry and a Megatron launch script). Weights: same tensor shapes as 3.1-70B, so the
    # 3.1-70B [IDX] figure; the 3.3 index itself was not seen.
    weight_bytes=141_107_412_992,
    max_context_tokens=131_072,
    is_moe=False,
    vocab_size=128_256,
)

# FP8 checkpoints. The Red Hat AI (formerly Neural Magic) recipe quantizes every Linear inside the
# transformer blocks to FP8 with per-tensor scales and ignores lm_head; embeddings are not Linear, so
# embed_tokens and lm_head stay bf16 (model card of neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8 and
# -70B-Instruct-FP8, "Only the weights and activations of the linear operators within transformers
# blocks are quantized", LLM Compressor recipe `ignore: ["lm_head"]`; stored copies in
# YinanWusoymilk/hf-readme). The repos now live under RedHatAI/ (vLLM's own tests load
# RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8); the neuralmagic/ ids are kept as aliases below.
# Bytes: block Linears at 1 byte/param + embed_tokens, lm_head and norms at 2 bytes/param.

LLAMA_3_1_8B_FP8 = ModelArchitecture(
    model_id="RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
    parameters_billion=8.03,
    num_layers=32,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    native_dtype="fp8",
    # UNVERIFIED [DERIVED]: 6,979,321,856 Linear params x 1 + 1,050,939,392 embedding/norm params x 2
    # (per-tensor scales add a few KB). The repo's total_size was not seen.
    weight_bytes=9_081_200_640,
    max_context_tokens=131_072,
    is_moe=False,
    vocab_size=128_256,
)

LLAMA_3_1_70B_FP8 = ModelArchitecture(
    model_id="RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8",
    parameters_billion=70.55,
    num_layers=80,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=8192,
    native_dtype="fp8",
    # UNVERIFIED [DERIVED]: 68,451,041,280 Linear params x 1 + 2,102,665,216 embedding/norm params x 2.
    weight_bytes=72_656_371_712,
    max_context_tokens=131_072,
    is_moe=False,
    vocab_size=128_256,
)

LLAMA_3_1_405B_FP8 = ModelArchitecture(
    model_id="meta-llama/Llama-3.1-405B-Instruct-FP8",
    parameters_billion=405.85,
    num_layers=126,
    num_attention_heads=128,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=16384,
    native_dtype="fp8",
    # Meta's FBGEMM row-wise FP8: only the MLPs of layers 1..124 are FP8; every self_attn, layers 0
    # and 125 and lm_head stay bf16 (the transformers FbgemmFp8 conversion example for this model
    # lists exactly those modules_to_not_convert). UNVERIFIED [DERIVED]: attention 143,747,186,688 B +
    # FP8 MLPs 324,538,466,304 B + bf16 MLPs of 2 layers 10,468,982,784 B + embed/lm_head
    # 8,405,385,216 B + norms 8,290,304 B + fp32 row scales 60,948,480 B. Cross-check: vLLM logged
    # "Loading model weights took 57.7520 GB" (GiB) per GPU at TP8 (vllm#6746); this gives 56.72.
    weight_bytes=487_229_259_776,
    max_context_tokens=131_072,
    is_moe=False,
    vocab_size=128_256,
)

# --- Qwen ---------------------------------------------------------------------------------------------
# Qwen2.5-Instruct configs keep max_position_embeddings 32768; the cards' 131,072 needs a YaRN
# rope_scaling edit to config.json ("The current config.json is set for context length up to 32,768
# tokens", Qwen2.5-7B-Instruct card). Qwen2.5 has QKV bias; vocab 152064 for 7B and up.

QWEN_2_5_7B = ModelArchitecture(
    model_id="Qwen/Qwen2.5-7B-Instruct",
    parameters_billion=7.62,  # 7,615,616,512 = total_size / 2 (card: 7.61B)
    num_layers=28,
    num_attention_heads=28,  # 28 is not divisible by 8: vLLM refuses TP8 for this model
    num_kv_heads=4,
    head_dim=128,
    hidden_size=3584,
    native_dtype="bfloat16",
    # [CFG] layers 28, hidden 3584, 28 Q / 4 KV heads, max_position_embeddings 32768, bf16,
    # vocab 152064, and [IDX] 15,231,233,024 (raw config.json and index of Qwen/Qwen2.5-7B-Instruct
    # at https://huggingface.co/Qwen/Qwen2.5-7B-Instruct, read 2026-09-29; card "28 for Q and 4 for KV").
    weight_bytes=15_231_233_024,
    max_context_tokens=32_768,
    is_moe=False,
    vocab_size=152_064,
)

QWEN_2_5_32B = ModelArchitecture(
    model_id="Qwen/Qwen2.5-32B-Instruct",
    parameters_billion=32.76,  # 32,763,876,352 (card: 32.5B)
    num_layers=64,
    num_attention_heads=40,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=5120,
    native_dtype="bfloat16",
    # [CFG] 64 layers, 40 heads, 8 KV heads, hidden 5120, intermediate 27648, vocab 152064, bf16
    # (stored copy of the Qwen2.5-32B config; the Instruct repo's max_position_embeddings is 32768 as
    # for all Qwen2.5-Instruct repos, see above). [IDX] 65,527,752,704 (unattributed test fixture
    # pairing it with a qwen2 config at max_position_embeddings 32768).
    weight_bytes=65_527_752_704,
    max_context_tokens=32_768,
    is_moe=False,
    vocab_size=152_064,
)

QWEN_2_5_72B = ModelArchitecture(
    model_id="Qwen/Qwen2.5-72B-Instruct",
    parameters_billion=72.71,  # 72,706,203,648 recomputed from [CFG]
    num_layers=80,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=8192,
    native_dtype="bfloat16",
    # [CFG] 80 layers, 64 heads, 8 KV heads, hidden 8192, intermediate 29568, max_position_embeddings
    # 32768, eos 151645 (instruct), bf16 (unattributed stored copy of the config).
    # UNVERIFIED [DERIVED]: 72,706,203,648 params x 2; the repo's total_size was not seen.
    weight_bytes=145_412_407_296,
    max_context_tokens=32_768,
    is_moe=False,
    vocab_size=152_064,
)

# Qwen3 configs set max_position_embeddings 40960 (cards: "32,768 natively", the extra 8192 being room
# for output); 131,072 needs YaRN. head_dim is explicit (128) and Q width can exceed hidden (32B).

QWEN_3_8B = ModelArchitecture(
    model_id="Qwen/Qwen3-8B",
    parameters_billion=8.19,  # 8,190,735,360
    num_layers=36,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    native_dtype="bfloat16",
    # [CFG] 36 layers, 32 heads, 8 KV heads, head_dim 128, hidden 4096, max_position_embeddings 40960,
    # bf16, vocab 151936 (stored copy, citsjtu2020/LLM-Prof sglang/Model_Config.md). [IDX]
    # 16,381,470,720 (unattributed tables of "official weight bytes" for Qwen/Qwen3-8B).
    weight_bytes=16_381_470_720,
    max_context_tokens=40_960,
    is_moe=False,
    vocab_size=151_936,
)

QWEN_3_32B = ModelArchitecture(
    model_id="Qwen/Qwen3-32B",
    parameters_billion=32.76,  # 32,762,123,264 (card: 32.8B)
    num_layers=64,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=5120,
    native_dtype="bfloat16",
    # [CFG] 64 layers, 64 heads, 8 KV heads, head_dim 128, hidden 5120, max_position_embeddings 40960,
    # bf16 (same stored copy; card "64 for Q and 8 for KV"). [IDX] 65,524,246,528 (several stored
    # copies of Qwen/Qwen3-32B's index).
    weight_bytes=65_524_246_528,
    max_context_tokens=40_960,
    is_moe=False,
    vocab_size=151_936,
)

# --- Mistral ------------------------------------------------------------------------------------------

MISTRAL_7B_V0_3 = ModelArchitecture(
    model_id="mistralai/Mistral-7B-Instruct-v0.3",
    parameters_billion=7.25,  # 7,248,023,552
    num_layers=32,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    native_dtype="bfloat16",
    # [CFG] 32 layers, 32 heads, 8 KV heads, hidden 4096, intermediate 14336, max_position_embeddings
    # 32768, vocab 32768 (v0.3's extended vocabulary), no sliding window. Read from unattributed
    # excerpts only; [IDX] 14,496,047,104 (stored loader docs "verified against Mistral 7B v0.3")
    # equals the recount from these figures to the byte, which corroborates them.
    weight_bytes=14_496_047_104,
    max_context_tokens=32_768,
    is_moe=False,
    vocab_size=32_768,
)

MIXTRAL_8X7B = ModelArchitecture(
    model_id="mistralai/Mixtral-8x7B-Instruct-v0.1",
    parameters_billion=46.70,  # 46,702,792,704 (8 experts, top-2)
    num_layers=32,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    native_dtype="bfloat16",
    # [CFG] MixtralForCausalLM: 32 layers, 32 heads, 8 KV heads, hidden 4096, intermediate 14336,
    # 8 local experts, 2 per token, max_position_embeddings 32768, vocab 32000, bf16 (unattributed
    # stored copy). [IDX] 93,405,585,408 (unattributed expert-selection script writing Mixtral's
    # index) equals the recount.
    weight_bytes=93_405_585_408,
    max_context_tokens=32_768,
    is_moe=True,
    vocab_size=32_000,
)

# --- gpt-oss ------------------------------------------------------------------------------------------
# [CFG] GptOss: hidden 2880, 64 heads, 8 KV heads, head_dim 64, max_position_embeddings 131072 (YaRN
# factor 32 over 4096), sliding_window 128 on every other layer (layer_types alternate
# sliding_attention/full_attention), vocab 201088, torch_dtype bfloat16 with quantization_config
# mxfp4 for the expert MLPs only (attention, router, embeddings stay bf16). Seen in several stored
# copies of the configs (e.g. EchoCog/gpt-oss-20b docs/gpt-oss-20b-architecture.md).
# Weights: the model card (arXiv 2508.10925) gives the checkpoint sizes 12.8 GiB and 60.8 GiB and
# 20.9B / 116.8B total parameters. vLLM holds more once loaded on H100 (MXFP4 expert tensors are
# padded): "Model loading took 13.47 GiB" / "64.38 GiB" at TP1 in public logs
# (tests/fixtures/calibration/vllm-startup-logs.json), which weight_bytes uses: memory is what it plans.

GPT_OSS_20B = ModelArchitecture(
    model_id="openai/gpt-oss-20b",
    parameters_billion=20.91,  # 20,914,757,184 (keras-hub preset metadata; card 20.9B)
    num_layers=24,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    hidden_size=2880,
    native_dtype="mxfp4",
    weight_bytes=round(13.47 * 1024**3),
    max_context_tokens=131_072,
    is_moe=True,  # 32 experts, 4 per token
    sliding_window_layers=12,
    sliding_window_tokens=128,
    vocab_size=201_088,
)

GPT_OSS_120B = ModelArchitecture(
    model_id="openai/gpt-oss-120b",
    parameters_billion=116.83,  # card: 116.8B total, 5.1B active
    num_layers=36,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    hidden_size=2880,
    native_dtype="mxfp4",
    weight_bytes=round(64.38 * 1024**3),
    max_context_tokens=131_072,
    is_moe=True,  # 128 experts, 4 per token
    sliding_window_layers=18,
    sliding_window_tokens=128,
    vocab_size=201_088,
)


MODELS: Mapping[str, ModelArchitecture] = MappingProxyType(
    {
        m.model_id: m
        for m in (
            LLAMA_3_1_8B,
            LLAMA_3_1_70B,
            LLAMA_3_1_405B,
            LLAMA_3_3_70B,
            LLAMA_3_1_8B_FP8,
            LLAMA_3_1_70B_FP8,
            LLAMA_3_1_405B_FP8,
            QWEN_2_5_7B,
            QWEN_2_5_32B,
            QWEN_2_5_72B,
            QWEN_3_8B,
            QWEN_3_32B,
            MISTRAL_7B_V0_3,
            MIXTRAL_8X7B,
            GPT_OSS_20B,
            GPT_OSS_120B,
        )
    }
)

# Older or moved names of the same checkpoints: Meta renamed "Meta-Llama-3.1-*" to "Llama-3.1-*" on the
# Hub, and the Neural Magic FP8 repos moved to the RedHatAI organisation (see the FP8 note above).
ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "meta-llama/Meta-Llama-3.1-8B-Instruct": LLAMA_3_1_8B.model_id,
        "meta-llama/Meta-Llama-3.1-70B-Instruct": LLAMA_3_1_70B.model_id,
        "meta-llama/Meta-Llama-3.1-405B-Instruct": LLAMA_3_1_405B.model_id,
        "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8": LLAMA_3_1_405B_FP8.model_id,
        "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8": LLAMA_3_1_8B_FP8.model_id,
        "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8": LLAMA_3_1_70B_FP8.model_id,
    }
)


def lookup_model(model_id: str) -> ModelArchitecture | None:
    """The catalog entry for a Hugging Face id (exact, alias, or case-insensitive), else None."""
    if not isinstance(model_id, str):
        return None
    wanted = model_id.strip()
    canonical = ALIASES.get(wanted, wanted)
    if canonical in MODELS:
        return MODELS[canonical]
    # Hub ids are case-insensitive in URLs; a hand-typed "qwen/qwen3-8b" should still find the entry.
    folded = {key.lower(): key for key in (*MODELS, *ALIASES)}
    key = folded.get(wanted.lower())
    if key is None:
        return None
    return MODELS[ALIASES.get(key, key)]


def known_model_ids() -> list[str]:
    return sorted(MODELS, key=str.lower)
