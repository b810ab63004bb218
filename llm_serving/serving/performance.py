"""A roofline estimate of one replica's latency and throughput (pure, no Pulumi import).

Decode is memory-bound: each step reads every weight on the GPU once and every running request's
KV cache, so the inter-token latency (ITL) at a concurrency is those bytes over the achieved memory
bandwidth, plus a fixed per-step cost (scheduling, sampling, kernel launches) and, with tensor
parallelism, two all-reduces per layer. Prefill is compute-bound: about 2 FLOPs per parameter per
prompt token plus attention's quadratic term, over the achieved dense FLOPs.

A busy replica also prefills the requests that arrive while others decode. By Little's law a replica
holding `c` requests of `o` output tokens admits c / (o x TPOT) requests per second, each costing a
prefill time p, so the time per output token a request sees is TPOT = ITL + c x p / o. Throughput,
cost and the SLO-bound concurrency use TPOT; ITL is the decode step alone (what a median ITL shows).

The constants below were fitted to two published sweeps (vLLM 0.11.1) and checked against other
models, TP sizes and releases; the comparison table and how far to trust it are in
docs/capacity-planner.md ("Latency and throughput").
p95 latencies are treated as the medians the benchmarks publish: a planning figure, not an SLO proof.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .capacity import DEFAULT_MAX_NUM_BATCHED_TOKENS, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
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
    # The L4 datasheet gives BF16 only with sparsity (242 TFLOPS); halved.
    "NVIDIA-L4": GpuPerformance(0.3e12, 121e12, "nvidia.com/en-us/data-center/l4 (L4 datasheet)"),
    # The DGX B200 datasheet gives the 8-GPU system (64 TB/s HBM3e, 36 PFLOPS FP16/BF16 with sparsity):
    # per GPU an eighth, and dense half of that. p6-b200.48xlarge carries 8 B200 (EC2 ac.html).
    "NVIDIA-B200": GpuPerformance(8e12, 2.25e15, "NVIDIA DGX B200 datasheet (8 x B200), per GPU"),
}

# Catalog GPUs (llm_serving/gpu/catalog.py) with no figures above, and why: the planner then plans
# memory and price but says it has no latency figures, instead of borrowing another GPU's.
UNPUBLISHED_PERFORMANCE: dict[str, str] = {
    "NVIDIA-A10G": "no NVIDIA datasheet of the A10G (an A10 variant made for AWS) was found; its tensor "
                   "throughput differs from the A10's (baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference) "
                   "and third-party tables disagree on it",
}

# Fitted by least squares on relative error to the ML.ENERGY v3.0 sweeps of Llama 3.1 8B (TP1) and
# 70B (TP4) on H100 at 8 to 768 concurrent sequences (vLLM 0.11.1; docs/capacity-planner.md):
# the share of peak memory bandwidth a decode step achieves, its fixed cost, the cost per running
# sequence per step (scheduling, sampling and streaming its token), and per all-reduce with NVLink
# (two per layer when TP > 1).
MEMORY_EFFICIENCY = 0.86
STEP_OVERHEAD_SECONDS = 0.001
SEQUENCE_STEP_SECONDS = 0.000050
ALLREDUCE_SECONDS = 0.000020
# Share of dense peak FLOPs that batched decode and prefill achieve (same fit), and the fixed cost of
# a request's first token (HTTP, tokenization, scheduling), which dominates short prompts.
COMPUTE_EFFICIENCY = 0.7
FIRST_TOKEN_OVERHEAD_SECONDS = 0.040


@dataclass(frozen=True)
class Latency:
    itl_seconds: float  # one decode step
    tpot_seconds: float  # per output token, including the prefills of arriving requests
    output_tokens_per_second: float  # the replica's, across its running requests
    ttft_seconds: float  # a new request's, chunked in beside the running decodes, before any queueing


def decode_step_seconds(model: ModelArchitecture, gpu: GpuPerformance, tp: int, concurrency: int,
                        context_tokens: int, kv_cache_dtype: str = "auto") -> float:
    """One decode step with `concurrency` requests each holding `context_tokens` of KV."""
    read = weight_bytes_per_gpu(model, tp) + concurrency * context_tokens * kv_bytes_per_token_per_gpu(
        model, tp, kv_cache_dtype)
    memory = read / (gpu.memory_bytes_per_second * MEMORY_EFFICIENCY)
    compute = 2 * model.weight_bytes / 2 / tp * concurrency / (gpu.bf16_dense_flops * COMPUTE_EFFICIENCY)
    reduce = 2 * model.num_layers * ALLREDUCE_SECONDS if tp > 1 else 0.0
    return max(memory, compute) + STEP_OVERHEAD_SECONDS + concurrency * SEQUENCE_STEP_SECONDS + reduce


def prefill_seconds(model: ModelArchitecture, gpu: GpuPerformance, tp: int, prompt_tokens: int) -> float:
    """GPU time of one prompt's prefill: 2 FLOPs per parameter per token (parameters taken as weight
    bytes / 2) plus attention's n^2 term, over the achieved dense FLOPs."""
    parameters = model.weight_bytes / 2
    flops = 2 * parameters * prompt_tokens + 2 * model.num_layers * model.hidden_size * prompt_tokens ** 2
    return flops / (tp * gpu.bf16_dense_flops * COMPUTE_EFFICIENCY)


def ttft_seconds(model: ModelArchitecture, gpu: GpuPerformance, tp: int, prompt_tokens: int) -> float:
    """An unqueued request's time to first token: its prefill and the fixed cost."""
    return prefill_seconds(model, gpu, tp, prompt_tokens) + FIRST_TOKEN_OVERHEAD_SECONDS


def latency(model: ModelArchitecture, gpu: GpuPerformance, tp: int, concurrency: int, prompt_tokens: int,
            output_tokens: int, kv_cache_dtype: str = "auto",
            max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> Latency:
    """ITL, TPOT, throughput and TTFT of one replica holding `concurrency` requests.

    TTFT under load: chunked prefill gives a new prompt what the step's token budget
    (`max_num_batched_tokens`) leaves after one token per running request, so the prompt takes
    ceil(prompt / (budget - concurrency)) steps, each a decode step plus its share of the prefill.
    """
    # Over a request's life its KV grows from the prompt to prompt + output: the mean is halfway.
    context = prompt_tokens + output_tokens // 2
    step = decode_step_seconds(model, gpu, tp, concurrency, context, kv_cache_dtype)
    prefill = prefill_seconds(model, gpu, tp, prompt_tokens)
    tpot = step + concurrency * prefill / max(1, output_tokens)
    steps = math.ceil(prompt_tokens / max(1, max_num_batched_tokens - concurrency))
    ttft = FIRST_TOKEN_OVERHEAD_SECONDS + prefill + steps * step
    return Latency(step, tpot, concurrency / tpot, ttft)


def slo_concurrency(model: ModelArchitecture, gpu: GpuPerformance, tp: int, itl_slo_seconds: float,
                    prompt_tokens: int, output_tokens: int, max_concurrency: int,
                    kv_cache_dtype: str = "auto", ttft_slo_seconds: float = math.inf,
                    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> int:
    """The most concurrent requests (up to what the KV cache holds) whose time per output token (TPOT,
    which includes the prefills a busy replica interleaves) stays within the ITL SLO and whose TTFT
    (before queueing) within the TTFT SLO; 0 when even one request misses them."""
    best = 0
    for concurrency in range(1, max(1, max_concurrency) + 1):
        at = latency(model, gpu, tp, concurrency, prompt_tokens, output_tokens, kv_cache_dtype,
                     max_num_batched_tokens)
        if at.tpot_seconds > itl_slo_seconds or at.ttft_seconds > ttft_slo_seconds:
            break
        best = concurrency
    return best


def usd_per_million_output_tokens(usd_per_replica_hour: float, output_tokens_per_second: float) -> float:
    if output_tokens_per_second <= 0:
        return math.inf
    return round(usd_per_replica_hour / (output_tokens_per_second * 3600) * 1e6, 2)
