"""A roofline estimate of one replica's latency and throughput (pure, no Pulumi import).

Decode is memory-bound: each step reads every weight on the GPU once and every running request's
KV cache, so the inter-token latency (ITL) at a concurrency is those bytes over the achieved memory
bandwidth, plus a fixed per-step cost (scheduling, sampling, kernel launches) and, with tensor
parallelism, two all-reduces per layer. Prefill is compute-bound: about 2 FLOPs per parameter per
prompt token plus attention's quadratic term, over the achieved dense FLOPs.

The constants below were fitted to two published vLLM benchmarks and checked against two more; the
comparison table and how far to trust it are in docs/capacity-planner.md ("Latency and throughput").
p95 latencies are treated as the medians the benchmarks publish: a planning figure, not an SLO proof.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .capacity import kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from .models import ModelArchitecture


@dataclass(frozen=True)
class GpuPerformance:
    memory_bytes_per_second: float
    bf16_dense_flops: float
    source: str


# Dense (not sparse) figures from NVIDIA's datasheets; sparse figures halved.
GPU_PERFORMANCE: dict[str, GpuPerformance] = {
    "NVIDIA-H100-80GB-HBM3": GpuPerformance(3.35e12, 989.5e12, "nvidia.com/en-us/data-center/h100"),
    "NVIDIA-H200": GpuPerformance(4.8e12, 989.5e12, "nvidia.com/en-us/data-center/h200"),
    "NVIDIA-A100-SXM4-80GB": GpuPerformance(2.039e12, 312e12, "NVIDIA A100 datasheet (nvidia-a100-datasheet r4)"),
    "NVIDIA-A100-SXM4-40GB": GpuPerformance(1.555e12, 312e12, "NVIDIA A100 datasheet (nvidia-a100-datasheet r4)"),
    "NVIDIA-L40S": GpuPerformance(0.864e12, 362.05e12, "nvidia.com/en-us/data-center/l40s"),
}

# Fitted (docs/capacity-planner.md): the share of peak memory bandwidth a decode step achieves, and
# its fixed cost. Both from the Llama 3.1 8B and Qwen3 8B single-H100 rows of the table.
MEMORY_EFFICIENCY = 0.84
STEP_OVERHEAD_SECONDS = 0.0015
# Per all-reduce with NVLink (two per layer when TP > 1); checked against the 70B TP4 row.
ALLREDUCE_SECONDS = 0.000030
# Share of dense peak FLOPs a long prefill achieves, and the fixed cost of a request's first token
# (HTTP, tokenization, scheduling), which dominates short prompts.
COMPUTE_EFFICIENCY = 0.5
FIRST_TOKEN_OVERHEAD_SECONDS = 0.040


@dataclass(frozen=True)
class Latency:
    itl_seconds: float
    output_tokens_per_second: float  # the replica's, across its running requests
    ttft_seconds: float


def decode_step_seconds(model: ModelArchitecture, gpu: GpuPerformance, tp: int, concurrency: int,
                        context_tokens: int, kv_cache_dtype: str = "auto") -> float:
    """One decode step with `concurrency` requests each holding `context_tokens` of KV."""
    read = weight_bytes_per_gpu(model, tp) + concurrency * context_tokens * kv_bytes_per_token_per_gpu(
        model, tp, kv_cache_dtype)
    memory = read / (gpu.memory_bytes_per_second * MEMORY_EFFICIENCY)
    compute = 2 * model.weight_bytes / 2 / tp * concurrency / (gpu.bf16_dense_flops * COMPUTE_EFFICIENCY)
    reduce = 2 * model.num_layers * ALLREDUCE_SECONDS if tp > 1 else 0.0
    return max(memory, compute) + STEP_OVERHEAD_SECONDS + reduce


def ttft_seconds(model: ModelArchitecture, gpu: GpuPerformance, tp: int, prompt_tokens: int) -> float:
    """An unqueued request's time to first token: prefill FLOPs (2 per parameter per token, parameters
    taken as weight bytes / 2, plus attention's n^2 term) over achieved FLOPs, and the fixed cost."""
    parameters = model.weight_bytes / 2
    flops = 2 * parameters * prompt_tokens + 2 * model.num_layers * model.hidden_size * prompt_tokens ** 2
    return flops / (tp * gpu.bf16_dense_flops * COMPUTE_EFFICIENCY) + FIRST_TOKEN_OVERHEAD_SECONDS


def latency(model: ModelArchitecture, gpu: GpuPerformance, tp: int, concurrency: int, prompt_tokens: int,
            output_tokens: int, kv_cache_dtype: str = "auto") -> Latency:
    # Over a request's life its KV grows from the prompt to prompt + output: the mean is halfway.
    context = prompt_tokens + output_tokens // 2
    step = decode_step_seconds(model, gpu, tp, concurrency, context, kv_cache_dtype)
    return Latency(step, concurrency / step, ttft_seconds(model, gpu, tp, prompt_tokens))


def slo_concurrency(model: ModelArchitecture, gpu: GpuPerformance, tp: int, itl_slo_seconds: float,
                    prompt_tokens: int, output_tokens: int, max_concurrency: int,
                    kv_cache_dtype: str = "auto") -> int:
    """The most concurrent requests (up to what the KV cache holds) whose ITL stays within the SLO; 0
    when even one request misses it."""
    best = 0
    for concurrency in range(1, max(1, max_concurrency) + 1):
        if latency(model, gpu, tp, concurrency, prompt_tokens, output_tokens, kv_cache_dtype).itl_seconds \
                > itl_slo_seconds:
            break
        best = concurrency
    return best


def usd_per_million_output_tokens(usd_per_replica_hour: float, output_tokens_per_second: float) -> float:
    if output_tokens_per_second <= 0:
        return math.inf
    return round(usd_per_replica_hour / (output_tokens_per_second * 3600) * 1e6, 2)
