"""The memory LoRA adapters take (pure, no Pulumi import): on each GPU, out of the KV cache's room, and in the
serving pod's host memory. Their flags and staged paths are engine.py's (`lora_args`, `staged_adapter_path`), the
staging Job's check of each adapter stage_adapter.py's.

GPU memory (vllm/lora/layers/base_linear.py:104-150 `create_lora_weights`): each wrapped linear preallocates, for
each of its slices, A = max_loras x max_lora_rank x in and B = max_loras x out x max_lora_rank, in the LoRA dtype
(auto: the model's). Column-parallel layers (qkv_proj, gate_up_proj) shard B's `out` over TP and keep A whole;
row-parallel ones (o_proj, down_proj) shard A's `in` and keep B whole (without `--fully-sharded-loras`). vLLM
allocates them inside the weights' memory profile (v1/worker/gpu_model_runner.py `load_model` ->
`load_lora_model`), so they come out of the KV cache's room (gpu_worker.py `determine_available_memory`).
The dimensions are the Llama decoder's: qkv has three slices of `hidden` in and q + 2 kv heads out, gate_up two
slices of `hidden` in and 2 x intermediate out. Llama-3.1-8B at max_loras 4, rank 16, bf16: 81,920 elements per
layer per rank unit, 320 MiB over the decoder, and 32 MiB more for the embedding and lm_head without target
modules (the tests check both figures).

Host memory (vllm/lora/worker_manager.py, lora_model.py): an LRU of `max_cpu_loras` adapters in pinned host
memory, each as large as its rank over its target modules; planned at `max_lora_rank` over the full (unsharded)
modules, for every TP rank (each worker has its own manager): an upper bound.
"""

from __future__ import annotations

import math

from .args import LoraArgs, LoraTargetModule
from .engine import max_cpu_loras
from .models import ModelArchitecture

ALL_TARGET_MODULES = tuple(LoraTargetModule)


def target_modules(lora: LoraArgs) -> tuple[LoraTargetModule, ...]:
    return tuple(lora.target_modules) if lora.target_modules else ALL_TARGET_MODULES


def intermediate_size(model: ModelArchitecture) -> int:
    """The MLP's width, from the parameter count: per layer, parameters = attention (h x (q + 2 kv) + q x h) + MLP
    (3 x h x i) + two norms; the embeddings (two vocab x h matrices) and the final norm are taken off first. The
    parameters are the checkpoint's bytes over its dtype for 16-bit checkpoints (exact), else `parameters_billion`.
    Rounded up. Llama-3.1-8B and 70B give their config.json's 14336 and 28672 (the tests check both)."""
    bytes_per_parameter = {"bfloat16": 2, "float16": 2, "float32": 4}.get(model.native_dtype)
    parameters = (model.weight_bytes // bytes_per_parameter if bytes_per_parameter
                  else int(model.parameters_billion * 1e9))
    h, q = model.hidden_size, model.num_attention_heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    embeddings = 2 * (model.vocab_size or 0) * h
    per_layer = (parameters - embeddings - h) / model.num_layers - 2 * h
    attention = h * (q + 2 * kv) + q * h
    return max(1, math.ceil((per_layer - attention) / (3 * h)))


def elements_per_rank_unit(model: ModelArchitecture, modules: tuple[LoraTargetModule, ...], tp: int) -> int:
    """Σ over the wrapped linears of one layer of (A's in + B's out) on one GPU: the LoRA buffer elements per
    layer, per adapter slot, per unit of rank (module docstring)."""
    h, q = model.hidden_size, model.num_attention_heads * model.head_dim
    kv = max(1, model.num_kv_heads // tp) * model.head_dim  # K/V heads replicated when TP exceeds them
    i = intermediate_size(model)
    size = {
        LoraTargetModule.QKV_PROJ: 3 * h + q // tp + 2 * kv,
        LoraTargetModule.O_PROJ: q // tp + h,
        LoraTargetModule.GATE_UP_PROJ: 2 * h + 2 * math.ceil(i / tp),
        LoraTargetModule.DOWN_PROJ: math.ceil(i / tp) + h,
    }
    return sum(size[m] for m in modules)


def embedding_elements_per_rank_unit(model: ModelArchitecture, lora: LoraArgs, pp: int) -> int:
    """The embedding and lm_head LoRA buffers, per adapter slot and unit of rank, on one GPU. Without
    `--lora-target-modules` vLLM also wraps the modules an architecture lists as `embedding_modules` (Llama and Qwen3
    list embed_tokens and lm_head: vllm/lora/utils.py get_supported_lora_modules, model_manager.py), each in full on
    every TP rank: the embedding's A is vocab x rank and B hidden x rank (layers/vocab_parallel_embedding.py), the
    lm_head's A rank x hidden and B vocab x rank (layers/logits_processor.py). Counted for every architecture (an
    upper bound for those that list none, such as Mistral's); with PP the fullest stage holds one of the two."""
    if lora.target_modules:
        return 0
    one = (model.vocab_size or 0) + model.hidden_size
    return one if pp > 1 else 2 * one


def gpu_bytes_per_gpu(model: ModelArchitecture, lora: LoraArgs, tp: int, pp: int = 1) -> int:
    """LoRA buffers on one GPU of the fullest stage: max_loras slots at max_lora_rank over the target modules (and,
    without target modules, the embedding and lm_head)."""
    layers = -(-model.num_layers // pp)
    elements = (layers * elements_per_rank_unit(model, target_modules(lora), tp)
                + embedding_elements_per_rank_unit(model, lora, pp))
    return lora.max_loras * lora.max_lora_rank * model.activation_bytes * elements


def cpu_bytes_per_pod(model: ModelArchitecture, lora: LoraArgs, tp: int) -> int:
    """Pinned host memory of the adapter LRU, upper bound: max_cpu_loras adapters at max_lora_rank over the whole
    target modules, in every TP worker."""
    return (max_cpu_loras(lora) * lora.max_lora_rank * model.activation_bytes * model.num_layers
            * elements_per_rank_unit(model, target_modules(lora), 1) * tp)
