"""Capacity planner: per-GPU memory of a vLLM replica, tensor-parallel size, KV-cache tokens,
concurrency at a context length, and cold-start/startup-probe budgets. Pure functions, no Pulumi,
so `python -m stacks plan` and the workload component derive every number from the same code.

Memory model (per GPU of one replica; follows vLLM V1 `gpu_worker.determine_available_memory`, see
vllm-project/vllm vllm/v1/worker/gpu_worker.py, vllm/v1/kv_cache_interface.py `AttentionSpec`
and vllm/config/model.py `get_num_kv_heads`):

    usable       = total_gpu_memory x --gpu-memory-utilization
    kv_available = usable - weights/TP - runtime_overhead
    kv_tokens    = floor(kv_available / (kv_bytes_per_token x block)) x block      (block = 16)
    kv_bytes_per_token = 2 (K and V) x layers x max(1, kv_heads // TP) x head_dim x dtype_bytes
    max_concurrency    = kv_tokens / max_model_len

vLLM measures the overhead by profiling; we estimate it (runtime_overhead_bytes) as a sum of terms
fitted to 16 public V1 startup logs (tests/fixtures/calibration/vllm-startup-logs.json: vLLM
0.10-0.19, H100 and A100 80GB, TP 1-4, dense and MoE, bf16, fp8 and mxfp4 weights; each row has its
URL, test_calibration.py runs every one):

  base        1.9 GiB: torch workspace, cuBLAS handles, allocator slack and the activation peak of a
              batch of up to 8192 tokens (every log's budget). The 8B logs at TP1-4 leave 1.9-2.1 GiB
              besides weights, sampler and graphs whatever the hidden size, so a per-token activation
              term did not fit them: at these batch sizes the peak is set by buffers, not by tokens.
  sampler     min(max_num_batched_tokens, max_num_seqs) x vocab x 17 bytes: V1's profile ends with a
              dummy sampler run over max_num_seqs rows of fp32 logits, softmax and sort buffers.
  TP buffers  2.1 GiB on any TP > 1: NCCL and custom all-reduce buffers (the 8B logs at TP2 and TP4
              carry the same extra 2.0 GiB over TP1).
  MoE scratch 0.9 GiB for fused-MoE workspaces (gpt-oss and Mixtral logs).
  activation  only for max_num_batched_tokens above 8192: the excess x hidden x (16 + 40/TP) bytes
              (8 bf16 copies of the hidden state every rank keeps whole, 20 that TP splits).
  cudagraphs  1.5 GiB, since v0.21 vLLM subtracts its CUDA-graph estimate from the KV budget
              (vllm-project/vllm#38284); the pinned v0.33.0 does, the calibration logs did not
              (plan(..., cuda_graphs_counted=False) reproduces them).

Fit: every term rounded so the planner never promises more KV memory than a log reported. 11 of the
16 rows are within 5 % of the log's "Available KV cache memory"; the rest are explained in
docs/capacity-planner.md ("Calibration"): Mixtral TP2 7.4 % (its fused-MoE scratch is smaller than
gpt-oss's), gpt-oss-20b on A100 5.8 % (Marlin's MXFP4 path loads 0.25 GiB more), gpt-oss-120b TP4 on
v0.10 8.2 % (that release reported less overhead), and two logs that started with 3.0-3.3 GiB of KV,
which the planner refuses as too small for one request (conservative where a few GiB are a large
share). Not calibrated to: V0-engine logs (vllm#12330's 9.37 GiB activation peak; vllm#6746's 405B-FP8
TP8 boot with 79,392 tokens, where we plan 116,240 at its util 0.90 because V0 reserved far more for
activations than V1 does). The pin runs V1.
A measured "Available KV cache memory: X GiB" line always beats this estimate: plan(...,
available_kv_gib=X) skips it.

Approximations: weights split evenly over TP (replicated norms and biases are ignored; KV heads
replicated when TP > kv_heads add their K/V projections again); sliding-window layers are sized as
full attention (conservative: vLLM's hybrid allocator gives them less); no pipeline parallelism,
no prefix-cache or speculative-decoding extras (a draft model adds KV layers, vllm-project/vllm#19996).

Length: the memory model with its sources (this docstring) and the one calculation that follows
it; every figure `plan` prints is computed in this file so it can be checked against one text.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeGuard

from .models import ACTIVATION_BYTES, ModelArchitecture, lookup_model

GIB = 1024**3
MIB = 1024**2

# vLLM's CUDA block size (vllm/platforms/cuda.py `check_and_update_config` @ 002db495); KV capacity is
# whole blocks.
DEFAULT_BLOCK_SIZE = 16
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# Above 0.98 nothing is left for the CUDA context and NCCL buffers vLLM allocates before its own
# accounting starts; vLLM's own default is 0.92 since v0.21 (vllm-project/vllm#38284).
MAX_GPU_MEMORY_UTILIZATION = 0.98
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# The OpenAI server's default batch budget on >= 70 GiB GPUs up to ~v0.28 (vllm/engine/arg_utils.py
# `get_batch_defaults` @ 99d7eb5d). Newer versions default to 16384 (vllm-project/vllm#51726; which
# release first ships it is unverified upstream), so the stack sets the flag explicitly and plans with
# the same number.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# What a stack sets `--max-num-seqs` to unless told otherwise, and what `plan` assumes: explicit, so
# the engine's own GPU-dependent default (below) never changes a reviewed plan.
DEFAULT_MAX_NUM_SEQS = 256

# --- the overhead model (the module docstring gives the fit and its sources) ---------------------
BASE_OVERHEAD_BYTES = 19 * GIB // 10
SAMPLER_BYTES_PER_LOGIT = 17
TP_COMMUNICATION_BYTES = 21 * GIB // 10
MOE_SCRATCH_BYTES = 9 * GIB // 10
# Every log used max_num_batched_tokens <= 8192; beyond it the activation peak grows by the old
# per-token estimate (8 bf16 copies of the hidden state on every rank, 20 that TP splits).
CALIBRATED_BATCH_TOKENS = 8192
# The range the logs cover (Qwen2.5-72B's hidden size 8192; TP 1-4); beyond it plan says so.
CALIBRATED_MAX_TP = 4
CALIBRATED_MAX_HIDDEN = 8192
REPLICATED_ACTIVATION_BYTES_PER_HIDDEN = 16
SHARDED_ACTIVATION_BYTES_PER_HIDDEN = 40
# vLLM's max_num_seqs default: 1024 on >= 70 GiB GPUs other than A100, else 256 (vllm/engine/arg_utils.py
# `get_batch_defaults` @ 99d7eb5d).
LARGE_GPU_MAX_NUM_SEQS = 1024
SMALL_GPU_MAX_NUM_SEQS = 256
LARGE_GPU_BYTES = 70 * GIB
# A logits width at least as large as any catalog model's (gpt-oss: 201,088), for unknown vocab.
UNKNOWN_VOCAB_SIZE = 262_144
# Since v0.21 vLLM subtracts its CUDA-graph estimate from the KV budget (vllm-project/vllm#38284); the pinned
# v0.33.0 does, the calibration logs (v0.10-v0.19) did not.
CUDA_GRAPH_BYTES = 3 * GIB // 2

# --- cold start --------------------------------------------------------------------------------------
# gp3's baseline throughput: what a weights PVC delivers unless throughput was provisioned (valid
# range 125-1000 MiB/s, newer API 2,000; EC2 CreateVolume `Throughput`). Pass the real figure.
DEFAULT_STORAGE_READ_MIB_PER_SECOND = 125.0
# Process start, imports, NCCL init, torch.compile and memory profiling. Stored V1 logs show "init
# engine (profile, create kv cache, warmup model) took" 20-210 s, and 539 s once with a DeepGEMM
# warmup; first boots compile, later ones hit the compile cache (VLLM_CACHE_ROOT, vllm/envs.py).
DEFAULT_ENGINE_STARTUP_SECONDS = 180
# "Graph capturing finished in N secs": 1-69 s in stored logs.
DEFAULT_GRAPH_CAPTURE_SECONDS = 60
# The torch.compile share of DEFAULT_ENGINE_STARTUP_SECONDS on a cold cache: 66.54 s of compilation for
# an 8B model (vllm-project/vllm#11078, the torch.compile usage guide's published run); no published
# figure for a 70B at TP4 was found, and compile time follows the graph count more than the model size
# (vllm#20451: Llama-3.1-70B splits into 80 piecewise subgraphs, most of them cache hits after the first).
DEFAULT_COMPILE_SECONDS = 67
# The same step loading a warm cache: "torch.compile takes 7.51 s in total" (vllm#20264), 9.61 s with
# AOT artifacts on a TP2 run (noonghunna/club-3090#142), about 7 s for an 8B (llm-d-incubation/
# llm-d-fast-model-actuation#111). CUDA graphs are captured again at every start either way.
DEFAULT_COMPILE_CACHED_SECONDS = 10
# Why x2 and a 10-minute floor: a startup probe that kills a pod mid-load restarts the whole load,
# so a too-small budget turns one slow start into a crash loop that never serves (vllm-project/aibrix#772,
# kserve/kserve#5063); too large only delays noticing a hung start. Read speed varies
# (volumes restored from EBS snapshots fetch blocks lazily on first read; shared storage), and a
# cold compile cache adds minutes. Surveyed charts use 10-60 min budgets (production-stack 10 min,
# llm-d 60 min).
STARTUP_SAFETY_FACTOR = 2.0
MIN_STARTUP_BUDGET_SECONDS = 600
STARTUP_PROBE_PERIOD_SECONDS = 10

# --kv-cache-dtype values the planner can size. vLLM knows more (vllm/config/cache.py `CacheDType`; per-token-head
# quantized modes add scale tensors this model does not count), so those are refused, not guessed.
KV_CACHE_DTYPE_BYTES: Mapping[str, int] = MappingProxyType(
    {"bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
)


class CapacityError(Exception):
    """A plan that cannot work; the message is one line with the numbers and what to change."""


# --- units --------------------------------------------------------------------------------------------


def _gib(value: float) -> str:
    return f"{value / GIB:,.2f} GiB"


def _tokens(value: int) -> str:
    return f"{value:,}"


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# --- building blocks ------------------------------------------------------------------------------------


def served_weight_bytes(model: ModelArchitecture, quantization: str | None) -> int:
    """Bytes of weights in GPU memory. `--quantization fp8` on a 16-bit checkpoint quantizes the
    Linear layers online to 1 byte per parameter (vLLM fp8 online quantization); the embeddings and
    lm_head stay 16-bit (counted as two vocab x hidden matrices). Any other method names how the
    checkpoint is already stored, so its bytes are what vLLM loads."""
    if quantization != "fp8" or model.native_dtype not in ("bfloat16", "float16"):
        return model.weight_bytes
    embeddings = 2 * (model.vocab_size or UNKNOWN_VOCAB_SIZE) * model.hidden_size * 2
    return (model.weight_bytes - embeddings) // 2 + embeddings


def embedding_bytes(model: ModelArchitecture) -> int:
    """One vocab x hidden matrix in 16-bit (the input embedding, or lm_head): quantized checkpoints
    keep both in bf16."""
    return (model.vocab_size or UNKNOWN_VOCAB_SIZE) * model.hidden_size * 2


def weight_bytes_per_gpu(model: ModelArchitecture, tp: int, pp: int = 1) -> int:
    """Weights each rank of the fullest pipeline stage holds: total / TP, rounded up, with PP = 1.

    With PP > 1 vLLM splits the decoder layers evenly over the stages; the first stage also holds the
    embedding and the last lm_head (vllm/distributed/utils.py get_pp_indices), so a stage holds
    (total - 2 embeddings) / PP + one embedding, over its TP ranks. That assumes untied embeddings, as
    every catalog model that needs more than one node has; a tied model would hold a copy on the last
    stage too, about one embedding / PP more than planned here.

    An approximation: vLLM shards every Linear, the vocab-parallel embedding and lm_head, and MoE
    experts over TP, but replicates norms and biases, pads some shapes (vocab, MXFP4 experts), and
    replicates K/V projections when TP > kv_heads. Those are small next to the sharded matrices
    (Meta's 405B-FP8 at TP8: 56.72 GiB here, 57.75 GiB logged by vLLM, vllm#6746).
    """
    if pp == 1:
        return -(-model.weight_bytes // tp)
    embedding = embedding_bytes(model)
    stage = math.ceil((model.weight_bytes - 2 * embedding) / pp) + embedding
    return math.ceil(stage / tp)


def kv_dtype_bytes(model: ModelArchitecture, kv_cache_dtype: str) -> int:
    """Bytes per KV element for `--kv-cache-dtype`; "auto" is the model's activation dtype."""
    if kv_cache_dtype == "auto":
        # FP8/MXFP4 checkpoints run bf16 activations, so "auto" means 2 bytes for them too.
        return model.activation_bytes
    if kv_cache_dtype in KV_CACHE_DTYPE_BYTES:
        return KV_CACHE_DTYPE_BYTES[kv_cache_dtype]
    raise ValueError(
        f"--kv-cache-dtype {kv_cache_dtype!r} is not one the planner can size; "
        f"use one of: auto, {', '.join(KV_CACHE_DTYPE_BYTES)}"
    )


def kv_bytes_per_token_per_gpu(model: ModelArchitecture, tp: int, kv_cache_dtype: str, pp: int = 1) -> int:
    """KV bytes one token occupies on one rank (vLLM AttentionSpec page size / block size).

    KV heads split over TP; when TP exceeds them each rank keeps one (replicated), vLLM
    `get_num_kv_heads`. Every layer is counted as full attention, including sliding-window ones.
    With PP each stage holds the KV of its own layers only (num_layers / PP; the planner requires
    an even split).
    """
    kv_heads_per_gpu = max(1, model.num_kv_heads // tp)
    layers = -(-model.num_layers // pp)
    return 2 * layers * kv_heads_per_gpu * model.head_dim * kv_dtype_bytes(model, kv_cache_dtype)


def default_max_num_seqs(gpu_memory_bytes: int, gpu_name: str = "") -> int:
    """vLLM's max_num_seqs default for the OpenAI server on this GPU (vllm/engine/arg_utils.py
    `get_batch_defaults` @ 99d7eb5d)."""
    if gpu_memory_bytes >= LARGE_GPU_BYTES and "a100" not in gpu_name.lower():
        return LARGE_GPU_MAX_NUM_SEQS
    return SMALL_GPU_MAX_NUM_SEQS


def runtime_overhead_bytes(
    model: ModelArchitecture,
    tp: int,
    max_num_batched_tokens: int,
    *,
    max_num_seqs: int = LARGE_GPU_MAX_NUM_SEQS,
    cuda_graphs_counted: bool = True,
) -> int:
    """Non-weight, non-KV memory per rank: base + sampler + TP buffers + MoE scratch (+ activations
    beyond the calibrated batch) + CUDA graphs, fitted to public V1 logs (module docstring).

    `cuda_graphs_counted`: whether this vLLM subtracts graph memory from the KV budget (v0.21+).
    """
    vocab = model.vocab_size or UNKNOWN_VOCAB_SIZE
    sampler = min(max_num_batched_tokens, max_num_seqs) * vocab * SAMPLER_BYTES_PER_LOGIT
    beyond = max(0, max_num_batched_tokens - CALIBRATED_BATCH_TOKENS)
    activation = beyond * model.hidden_size * (REPLICATED_ACTIVATION_BYTES_PER_HIDDEN * tp
                                               + SHARDED_ACTIVATION_BYTES_PER_HIDDEN) // tp
    return (BASE_OVERHEAD_BYTES + sampler + activation + (TP_COMMUNICATION_BYTES if tp > 1 else 0)
            + (MOE_SCRATCH_BYTES if model.is_moe else 0) + (CUDA_GRAPH_BYTES if cuda_graphs_counted else 0))


def available_kv_bytes_per_gpu(
    gpu_memory_bytes: int,
    gpu_memory_utilization: float,
    model: ModelArchitecture,
    tp: int,
    max_num_batched_tokens: int,
    *,
    max_num_seqs: int = LARGE_GPU_MAX_NUM_SEQS,
    cuda_graphs_counted: bool = True,
    pp: int = 1,
) -> int:
    """Per-rank KV budget: memory x util - weights/TP - overhead. Negative means it does not fit."""
    usable = int(gpu_memory_bytes * gpu_memory_utilization)
    return (
        usable
        - weight_bytes_per_gpu(model, tp, pp)
        - runtime_overhead_bytes(model, tp, max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                 cuda_graphs_counted=cuda_graphs_counted)
    )


def kv_cache_tokens(available_kv_bytes: int, kv_bytes_per_token: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Tokens of KV that fit, in whole blocks (vLLM `num_blocks x block_size`); 0 when none fit."""
    if available_kv_bytes <= 0:
        return 0
    return available_kv_bytes // (kv_bytes_per_token * block_size) * block_size


def max_concurrency(kv_tokens: int, max_model_len: int) -> float:
    """Requests of max_model_len tokens the KV cache holds at once (vLLM's "Maximum concurrency")."""
    return kv_tokens / max_model_len


def tokens_per_request(max_model_len: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """KV tokens one full-length request reserves: whole blocks, as vLLM checks at startup."""
    return -(-max_model_len // block_size) * block_size


def tensor_parallel_problem(
    model: ModelArchitecture, tp: int, gpus_per_node: int, node: str = "the node"
) -> str | None:
    """Why `tp` cannot serve `model` on a node with `gpus_per_node` GPUs, or None when it can."""
    if not _is_int(tp) or tp not in TENSOR_PARALLEL_SIZES:
        return f"--tensor-parallel-size {tp} is not one of {', '.join(map(str, TENSOR_PARALLEL_SIZES))}"
    if gpus_per_node % tp:
        # A TP group is one pod on one node (docs/decisions.md), so it must fit and tile the node's GPUs.
        return f"--tensor-parallel-size {tp} does not divide the {gpus_per_node} GPU(s) of {node}"
    if model.num_attention_heads % tp:
        return (
            f"{model.model_id} has {model.num_attention_heads} attention heads, which "
            f"--tensor-parallel-size {tp} does not divide (vLLM requires it)"
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        return (
            f"{model.model_id} has {model.num_kv_heads} KV heads; --tensor-parallel-size {tp} must divide "
            "them or be a multiple of them"
        )
    return None


@dataclass(frozen=True)
class LayoutSizing:
    """What a TP x PP layout must fit: one GPU's memory and `target_concurrency` requests of
    `max_model_len` tokens in its KV cache, with the engine settings that decide the overhead."""

    gpu_memory_bytes: int
    gpus_per_node: int
    max_model_len: int
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    kv_cache_dtype: str = "auto"
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    max_num_seqs: int = LARGE_GPU_MAX_NUM_SEQS
    target_concurrency: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE
    cuda_graphs_counted: bool = True
    # LoRA buffers per GPU at (TP, PP), taken from the KV room (llm_serving/serving/lora.py); None: no LoRA.
    lora_bytes_per_gpu: Callable[[int, int], int] | None = None

    @property
    def needed_tokens(self) -> int:
        return self.target_concurrency * tokens_per_request(self.max_model_len, self.block_size)

    def shortfall(self, model: ModelArchitecture, tp: int, pp: int) -> str | None:
        """Why `model` does not fit as TP x PP, or None when it does."""
        problem = tensor_parallel_problem(model, tp, self.gpus_per_node) or pipeline_parallel_problem(
            model, tp, pp, self.gpus_per_node)
        if problem:
            return problem
        usable = int(self.gpu_memory_bytes * self.gpu_memory_utilization)
        weights = weight_bytes_per_gpu(model, tp, pp)
        if weights > usable:
            return f"weights {_gib(weights)}/GPU > {_gib(usable)} usable"
        available = available_kv_bytes_per_gpu(
            self.gpu_memory_bytes, self.gpu_memory_utilization, model, tp, self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs, cuda_graphs_counted=self.cuda_graphs_counted, pp=pp,
        ) - (self.lora_bytes_per_gpu(tp, pp) if self.lora_bytes_per_gpu else 0)
        tokens = kv_cache_tokens(available, kv_bytes_per_token_per_gpu(model, tp, self.kv_cache_dtype, pp),
                                 self.block_size)
        if tokens >= self.needed_tokens:
            return None
        return f"KV holds {_tokens(tokens)} tokens, needs {_tokens(self.needed_tokens)}"

    def smallest_tensor_parallel_size(self, model: ModelArchitecture) -> int:
        """Smallest TP in 1, 2, 4, 8 that tiles the node and holds `target_concurrency` full requests.

        Smallest because every extra rank is a GPU not serving another replica, and TP adds all-reduce
        latency (the seed's tuning order: "the smallest value that leaves healthy KV room").
        """
        reasons: list[str] = []
        for tp in TENSOR_PARALLEL_SIZES:
            if tp > self.gpus_per_node:
                break
            shortfall = self.shortfall(model, tp, 1)
            if shortfall is None:
                return tp
            reasons.append(f"TP{tp}: {shortfall}")
        sizes = ", ".join(str(tp) for tp in TENSOR_PARALLEL_SIZES if tp <= self.gpus_per_node)
        raise CapacityError(
            f"no --tensor-parallel-size in {sizes} fits {model.model_id} on {self.gpus_per_node} x "
            f"{_gib(self.gpu_memory_bytes)} GPU(s) for {self.target_concurrency} request(s) at --max-model-len "
            f"{self.max_model_len}: {'; '.join(reasons)}; use a GPU with more memory, an FP8 checkpoint, "
            "--kv-cache-dtype fp8, a lower --max-model-len, or more nodes per replica (--max-nodes-per-replica)"
        )

    def fewest_pipeline_stages(self, model: ModelArchitecture, max_nodes_per_replica: int) -> int:
        """Fewest whole nodes (PP stages of TP = GPUs per node) that hold the weights and the requests:
        TP within a node, PP across nodes (vLLM's parallelism_scaling guide: "too big for one node:
        TP = GPUs per node, PP = number of nodes")."""
        tp = self.gpus_per_node
        reasons: list[str] = []
        for pp in range(2, max_nodes_per_replica + 1):
            shortfall = self.shortfall(model, tp, pp)
            if shortfall is None:
                return pp
            reasons.append(f"PP{pp}: {shortfall}")
        raise CapacityError(
            f"no group of up to {max_nodes_per_replica} x {self.gpus_per_node} GPU(s) (TP{tp} x PP) fits "
            f"{model.model_id} for {self.target_concurrency} request(s) at --max-model-len {self.max_model_len}: "
            f"{'; '.join(reasons)}"
        )


def choose_tensor_parallel_size(
    model: ModelArchitecture, gpu_memory_bytes: int, gpus_per_node: int, max_model_len: int, **options: Any
) -> int:
    """LayoutSizing(...).smallest_tensor_parallel_size; `options` are its other fields."""
    return LayoutSizing(gpu_memory_bytes, gpus_per_node, max_model_len, **options).smallest_tensor_parallel_size(model)


def pipeline_parallel_problem(model: ModelArchitecture, tp: int, pp: int, gpus_per_node: int) -> str | None:
    """Why a TP x PP group cannot serve `model`, or None. A stage is one pod on one whole node."""
    if not _is_int(pp) or pp < 1:
        return f"--pipeline-parallel-size must be a positive integer, got {pp!r}"
    if pp == 1:
        return None
    if tp != gpus_per_node:
        return (f"with --pipeline-parallel-size {pp} each stage is one whole node: --tensor-parallel-size must be "
                f"{gpus_per_node}, not {tp}")
    if model.num_layers % pp:
        return (f"{model.model_id} has {model.num_layers} layers, which --pipeline-parallel-size {pp} does not "
                "divide (the planner sizes even stages)")
    return None


def cold_start_seconds(
    weight_bytes: int,
    storage_read_bytes_per_second: float,
    engine_startup_seconds: float = DEFAULT_ENGINE_STARTUP_SECONDS,
    graph_capture_seconds: float = DEFAULT_GRAPH_CAPTURE_SECONDS,
) -> int:
    """Seconds from container start to serving: read weights + engine init + CUDA-graph capture.

    Pass the TOTAL checkpoint bytes: all TP ranks read their shards from the same volume at once, so
    they share its throughput. Image pull happens before the container starts and is not counted
    (startup probes only run after it); a weight download from the Hub is not modelled (the stack
    pre-stages weights on a PVC).
    """
    if storage_read_bytes_per_second <= 0:
        raise ValueError(f"storage read speed must be positive, got {storage_read_bytes_per_second!r}")
    return math.ceil(weight_bytes / storage_read_bytes_per_second + engine_startup_seconds + graph_capture_seconds)


def compile_cache_hit_seconds(cold_start: int, compile_seconds: int, compile_cached_seconds: int) -> int:
    """A cold start whose torch.compile step loads a shared cache: the compile term swapped for the load.

    The startup probe keeps the cold figure: a key change (revision, engine, layout, GPU) always
    starts cold, and so does any replica that starts before the cache's producer has finished.
    """
    return cold_start - compile_seconds + min(compile_seconds, compile_cached_seconds)


def startup_probe_budget_seconds(
    cold_start: int,
    *,
    safety_factor: float = STARTUP_SAFETY_FACTOR,
    minimum_seconds: int = MIN_STARTUP_BUDGET_SECONDS,
    period_seconds: int = STARTUP_PROBE_PERIOD_SECONDS,
) -> int:
    """failureThreshold x periodSeconds for the startup probe: cold start x factor, floor, whole periods."""
    budget = max(minimum_seconds, math.ceil(cold_start * safety_factor))
    return -(-budget // period_seconds) * period_seconds


# --- the plan -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSpec:
    """The GPU facts the planner needs, for hardware outside the GPU catalog (or tests)."""

    name: str
    memory_bytes: int  # per GPU, as CUDA reports it (what vLLM multiplies by the utilization)
    gpus_per_node: int
    supports_fp8: bool | None = None  # None: unknown
    efa_interfaces: int | None = None  # None: unknown

    @classmethod
    def from_instance_type(cls, instance_type: Any) -> GpuSpec:
        """From a `llm_serving.gpu.InstanceType` (duck-typed: no import, this module stays pure)."""
        gpu = instance_type.gpu
        return cls(
            name=instance_type.name,
            memory_bytes=gpu.memory_bytes,
            gpus_per_node=instance_type.gpu_count,
            # A GPU described only in stack config has architecture "unknown": FP8 support unknown too.
            supports_fp8=None if gpu.architecture == "unknown" else gpu.supports_fp8,
            efa_interfaces=instance_type.efa_interfaces,
        )


def _gpu_spec(value: Any) -> tuple[GpuSpec, str]:
    """(spec, label for messages): a GpuSpec as is, an InstanceType converted."""
    if isinstance(value, GpuSpec):
        return value, value.name
    if hasattr(value, "gpu") and hasattr(value, "gpu_count"):
        spec = GpuSpec.from_instance_type(value)
        return spec, f"{spec.name} ({value.gpu.product_label})"
    raise TypeError(f"expected a GpuSpec or a llm_serving.gpu.InstanceType, got {type(value).__name__}")


@dataclass(frozen=True)
class CapacityPlan:
    """One replica of one model on one GPU type: what it needs and what it holds."""

    model_id: str
    gpu: str
    gpu_memory_gib: float
    gpus_per_node: int
    tensor_parallel_size: int
    max_model_len: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    max_num_batched_tokens: int
    max_num_seqs: int
    weights_gib_per_gpu: float
    runtime_overhead_gib_per_gpu: float | None  # None when the KV budget came from a vLLM log
    kv_bytes_per_token_per_gpu: int
    available_kv_gib_per_gpu: float
    kv_source: Literal["estimate", "measured"]
    kv_cache_tokens: int
    max_concurrency: float
    cold_start_seconds: int
    startup_budget_seconds: int
    notes: tuple[str, ...] = field(default=())
    storage_read_mib_per_second: float = DEFAULT_STORAGE_READ_MIB_PER_SECOND  # what cold_start_seconds assumed
    pipeline_parallel_size: int = 1  # stages, one whole node each when > 1
    # The cold start's terms (cold_start_seconds is their sum): reading the weights at the storage's
    # speed, engine start-up (imports, NCCL, profiling, KV allocation, CUDA-graph capture: captured at
    # every start) and torch.compile on a cold cache, which a shared compile cache shortens to
    # compile_cached_seconds.
    weights_load_seconds: int = 0
    engine_init_seconds: int = 0
    compile_seconds: int = DEFAULT_COMPILE_SECONDS
    compile_cached_seconds: int = DEFAULT_COMPILE_CACHED_SECONDS
    # LoRA adapters' GPU buffers, per GPU, already taken out of available_kv_gib_per_gpu (0: no LoRA).
    lora_gib_per_gpu: float = 0.0

    @property
    def cold_start_cached_seconds(self) -> int:
        """cold_start_seconds with the compile step loaded from a shared cache instead of run."""
        return compile_cache_hit_seconds(self.cold_start_seconds, self.compile_seconds, self.compile_cached_seconds)

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def nodes_per_replica(self) -> int:
        return self.pipeline_parallel_size

    @property
    def replicas_per_node(self) -> int:
        """Whole replicas one node holds; 0 for a replica that spans several nodes."""
        if self.pipeline_parallel_size > 1:
            return 0
        return self.gpus_per_node // self.tensor_parallel_size

    def to_json(self) -> dict[str, Any]:
        """snake_case keys; GiB and concurrency rounded to 2 decimals as vLLM logs them."""
        overhead = self.runtime_overhead_gib_per_gpu
        return {
            "tensor_parallel_size": self.tensor_parallel_size,
            "weights_gib_per_gpu": round(self.weights_gib_per_gpu, 2),
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "available_kv_gib_per_gpu": round(self.available_kv_gib_per_gpu, 2),
            "lora_gib_per_gpu": round(self.lora_gib_per_gpu, 2),
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "startup_budget_seconds": self.startup_budget_seconds,
            "storage_read_mib_per_second": self.storage_read_mib_per_second,
            # Extras.
            "model_id": self.model_id,
            "gpu": self.gpu,
            "gpu_memory_gib": round(self.gpu_memory_gib, 2),
            "gpus_per_node": self.gpus_per_node,
            "gpus_per_replica": self.gpus_per_replica,
            "replicas_per_node": self.replicas_per_node,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "nodes_per_replica": self.nodes_per_replica,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "runtime_overhead_gib_per_gpu": None if overhead is None else round(overhead, 2),
            "kv_source": self.kv_source,
            "cold_start_seconds": self.cold_start_seconds,
            "compile_seconds": self.compile_seconds,
            "compile_cached_seconds": self.compile_cached_seconds,
            "cold_start_cached_seconds": self.cold_start_cached_seconds,
            "notes": list(self.notes),
        }


def plan(
    model: ModelArchitecture | str,
    instance_type_or_gpu_spec: Any,
    max_model_len: int,
    tp: int | Literal["auto"] = "auto",
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    kv_cache_dtype: str = "auto",
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    available_kv_gib: float | None = None,
    target_concurrency: int = 1,
    storage_read_mib_per_second: float = DEFAULT_STORAGE_READ_MIB_PER_SECOND,
    engine_startup_seconds: float = DEFAULT_ENGINE_STARTUP_SECONDS,
    graph_capture_seconds: float = DEFAULT_GRAPH_CAPTURE_SECONDS,
    max_num_seqs: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    quantization: str | None = None,
    cuda_graphs_counted: bool = True,
    enforce_eager: bool = False,
    speculative_decoding: bool = False,
    pp: int | Literal["auto"] = 1,
    max_nodes_per_replica: int | None = None,
    lora_bytes_per_gpu: Callable[[int, int], int] | None = None,
) -> CapacityPlan:
    """Plan one replica; raises CapacityError (one line, with numbers) when it cannot work.

    `available_kv_gib` takes vLLM's own "Available KV cache memory: X GiB" for this model, GPU and TP
    instead of the overhead estimate, so a plan can be checked against (or pinned to) a real boot.
    `enforce_eager` (`--enforce-eager`): no CUDA graphs, so neither their memory nor their capture
    time. `speculative_decoding` (a `--speculative-config`): the draft's weights and KV layers are not
    modelled, which plan says in a note.
    `pp` (`--pipeline-parallel-size`): stages on whole nodes; "auto" with `tp="auto"` spreads a model that
    fits no single node over up to `max_nodes_per_replica` nodes, TP = GPUs per node within each
    (default: an explicit `pp`, else 1). "auto" with an explicit `tp` means PP 1.
    Every stage's pod reads the whole checkpoint, not its layers' share: vLLM 0.33.0 keeps every file on
    every pipeline stage (model_loader/default_loader.py get_all_weights, weight_utils.py
    safetensors_weights_iterator reads every tensor; runai_streamer_loader.py:232-263 on S3) and drops
    the other stages' tensors after reading them, so the weights term is the checkpoint at the pod's
    read speed, whatever `pp`.
    `lora_bytes_per_gpu` (TP, PP -> bytes; llm_serving/serving/lora.py): LoRA adapters' preallocated GPU buffers,
    which vLLM counts with the weights, so they come out of the estimated KV room (a measured
    `available_kv_gib` is taken as the boot logged it).
    """
    compile_seconds = min(DEFAULT_COMPILE_SECONDS, math.floor(engine_startup_seconds))
    if enforce_eager:
        cuda_graphs_counted = False
        graph_capture_seconds = 0
        compile_seconds = 0  # --enforce-eager runs without torch.compile
    if isinstance(model, str):
        found = lookup_model(model)
        if found is None:
            raise CapacityError(f"unknown model {model!r}; the catalog is llm_serving/serving/models.py")
        model = found
    # The checkpoint is read from storage as stored; GPU memory holds it as served.
    checkpoint_bytes = model.weight_bytes
    model = dataclasses.replace(model, weight_bytes=served_weight_bytes(model, quantization))
    gpu, gpu_label = _gpu_spec(instance_type_or_gpu_spec)

    if isinstance(gpu_memory_utilization, bool) or not 0 < gpu_memory_utilization <= MAX_GPU_MEMORY_UTILIZATION:
        raise CapacityError(
            f"--gpu-memory-utilization {gpu_memory_utilization} must be above 0 and at most "
            f"{MAX_GPU_MEMORY_UTILIZATION} (the rest holds the CUDA context and NCCL buffers)"
        )
    if not _is_int(max_model_len) or max_model_len < 1:
        raise CapacityError(f"--max-model-len must be a positive integer, got {max_model_len!r}")
    if max_model_len > model.max_context_tokens:
        raise CapacityError(
            f"--max-model-len {max_model_len} exceeds {model.model_id}'s context of "
            f"{model.max_context_tokens} tokens (max_position_embeddings); lower it"
        )
    if not _is_int(max_num_batched_tokens) or max_num_batched_tokens < 1:
        raise CapacityError(f"--max-num-batched-tokens must be a positive integer, got {max_num_batched_tokens!r}")
    if not _is_int(target_concurrency) or target_concurrency < 1:
        raise CapacityError(f"--target-concurrency must be a positive integer, got {target_concurrency!r}")
    if not storage_read_mib_per_second > 0:  # also refuses NaN
        raise CapacityError(f"storage read speed must be positive MiB/s, got {storage_read_mib_per_second!r}")
    try:
        kv_dtype_bytes(model, kv_cache_dtype)
    except ValueError as error:
        raise CapacityError(str(error)) from None
    if max_num_seqs is None:
        max_num_seqs = min(default_max_num_seqs(gpu.memory_bytes, gpu_label), max_num_batched_tokens)

    usable = int(gpu.memory_bytes * gpu_memory_utilization)
    if max_nodes_per_replica is None:
        max_nodes_per_replica = pp if _is_int(pp) and pp > 1 else 1
    if not _is_int(max_nodes_per_replica) or max_nodes_per_replica < 1:
        raise CapacityError(f"--max-nodes-per-replica must be a positive integer, got {max_nodes_per_replica!r}")
    if pp == "auto" and tp != "auto":
        pp = 1
    if pp != "auto" and pp != 1 and tp == "auto":
        tp = gpu.gpus_per_node  # a stage is one whole node
    if tp == "auto":
        if available_kv_gib is not None:
            raise CapacityError(
                "--available-kv-gib is one measured boot at one tensor-parallel size; "
                "give that --tensor-parallel-size instead of auto"
            )
        layout = LayoutSizing(
            gpu.memory_bytes, gpu.gpus_per_node, max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=kv_cache_dtype,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            target_concurrency=target_concurrency,
            block_size=block_size,
            cuda_graphs_counted=cuda_graphs_counted,
            lora_bytes_per_gpu=lora_bytes_per_gpu,
        )
        try:
            tp = layout.smallest_tensor_parallel_size(model)
            pp = 1
        except CapacityError:
            if pp != "auto" or max_nodes_per_replica == 1:
                raise
            pp = layout.fewest_pipeline_stages(model, max_nodes_per_replica)
            tp = gpu.gpus_per_node
    assert pp != "auto"
    problem = tensor_parallel_problem(model, tp, gpu.gpus_per_node, gpu.name) or pipeline_parallel_problem(
        model, tp, pp, gpu.gpus_per_node)
    if problem:
        raise CapacityError(problem)
    if pp > max_nodes_per_replica:
        raise CapacityError(f"--pipeline-parallel-size {pp} needs {pp} nodes per replica, more than the "
                            f"{max_nodes_per_replica} allowed (--max-nodes-per-replica)")

    weights = weight_bytes_per_gpu(model, tp, pp)
    if weights > usable:
        raise CapacityError(
            f"{model.model_id} needs {_gib(weights)} of weights per GPU at --tensor-parallel-size {tp}, "
            f"but {_gib(gpu.memory_bytes)} x --gpu-memory-utilization {gpu_memory_utilization} leaves "
            f"{_gib(usable)}; raise --tensor-parallel-size, use an FP8 checkpoint or a GPU with more memory"
        )

    overhead: int | None
    lora = lora_bytes_per_gpu(tp, pp) if lora_bytes_per_gpu is not None else 0
    lora_text = f" - {_gib(lora)} LoRA buffers" if lora else ""
    if available_kv_gib is None:
        overhead = runtime_overhead_bytes(model, tp, max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                          cuda_graphs_counted=cuda_graphs_counted)
        available = usable - weights - overhead - lora
        if available <= 0:
            raise CapacityError(
                f"no room for a KV cache: {_gib(usable)} usable - {_gib(weights)} weights - "
                f"{_gib(overhead)} runtime overhead{lora_text} per GPU at --tensor-parallel-size {tp}; raise "
                "--tensor-parallel-size, lower --max-num-batched-tokens or use an FP8 checkpoint"
                + ("; or lower maxLoras, maxLoraRank or targetModules" if lora else "")
            )
        kv_source: Literal["estimate", "measured"] = "estimate"
    else:
        if not (math.isfinite(available_kv_gib) and available_kv_gib > 0):
            raise CapacityError(f"--available-kv-gib must be positive, got {available_kv_gib!r}")
        overhead = None
        available = int(available_kv_gib * GIB)
        kv_source = "measured"

    per_token = kv_bytes_per_token_per_gpu(model, tp, kv_cache_dtype, pp)
    tokens = kv_cache_tokens(available, per_token, block_size)
    per_request = tokens_per_request(max_model_len, block_size)
    if tokens < target_concurrency * per_request:
        if target_concurrency == 1:
            wanted = f"one request at --max-model-len {max_model_len} needs {_tokens(per_request)}"
        else:
            wanted = (
                f"{target_concurrency} requests at --max-model-len {max_model_len} need "
                f"{_tokens(target_concurrency * per_request)}"
            )
        lora_room = (f" (after {_gib(lora)} of LoRA buffers per GPU, which leave {_gib(available)} of KV "
                     "room)" if lora else "")
        raise CapacityError(
            f"KV cache holds {_tokens(tokens)} tokens{lora_room} but {wanted}; lower --max-model-len, raise "
            "--tensor-parallel-size, or use --kv-cache-dtype fp8"
            + ("; or lower maxLoras, maxLoraRank or targetModules" if lora else "")
        )

    # Each stage's pod reads the whole checkpoint, all stages at once (docstring).
    cold = cold_start_seconds(checkpoint_bytes, storage_read_mib_per_second * MIB, engine_startup_seconds,
                              graph_capture_seconds)
    engine_init, graph_capture = math.ceil(engine_startup_seconds), math.ceil(graph_capture_seconds)
    return CapacityPlan(
        model_id=model.model_id,
        gpu=gpu.name,
        gpu_memory_gib=gpu.memory_bytes / GIB,
        gpus_per_node=gpu.gpus_per_node,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_cache_dtype,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        weights_gib_per_gpu=weights / GIB,
        runtime_overhead_gib_per_gpu=None if overhead is None else overhead / GIB,
        kv_bytes_per_token_per_gpu=per_token,
        available_kv_gib_per_gpu=available / GIB,
        kv_source=kv_source,
        kv_cache_tokens=tokens,
        max_concurrency=max_concurrency(tokens, max_model_len),
        cold_start_seconds=cold,
        startup_budget_seconds=startup_probe_budget_seconds(cold),
        notes=_notes(model, gpu, tp, kv_cache_dtype, kv_source)
        + ((f"{pp} pipeline stages of {tp} GPUs, one node each: weights and KV per GPU are the fullest stage's "
            "(even layer split, embedding and lm_head on the end stages); not in the calibration logs",)
           if pp > 1 else ())
        + ((f"each of the {pp} stages' pods reads the whole checkpoint, not its stage's share: the weights term "
            "is the checkpoint at the per-pod read speed",) if pp > 1 else ())
        + _pipeline_network_notes(model, gpu, pp, max_model_len)
        + (("--enforce-eager: no CUDA graphs; decode steps are slower than the latency estimate assumes",)
           if enforce_eager else ())
        + (("speculative decoding: the draft model's weights and KV layers are not in this plan; pass "
            "--available-kv-gib from a boot with it",) if speculative_decoding else ()),
        storage_read_mib_per_second=storage_read_mib_per_second,
        # torch.compile is a share of the engine's start-up; the rest of it, and the CUDA-graph
        # capture, is engine init.
        weights_load_seconds=max(0, cold - engine_init - graph_capture),
        engine_init_seconds=engine_init + graph_capture - compile_seconds,
        compile_seconds=compile_seconds,
        compile_cached_seconds=min(compile_seconds, DEFAULT_COMPILE_CACHED_SECONDS),
        lora_gib_per_gpu=lora / GIB,
    )


def _pipeline_network_notes(model: ModelArchitecture, gpu: GpuSpec, pp: int, max_model_len: int) -> tuple[str, ...]:
    """Pipeline stages on nodes without EFA: NCCL falls back to TCP sockets between them (vLLM sends each stage's
    hidden states to the next with torch.distributed send/recv), so say how much crosses each boundary."""
    if pp == 1 or gpu.efa_interfaces != 0:
        return ()
    per_token = model.hidden_size * ACTIVATION_BYTES[model.native_dtype]
    prefill = per_token * max_model_len
    return (f"{gpu.name} has no EFA: the {pp - 1} stage boundaries carry every token's hidden state ({per_token:,} "
            f"bytes) over TCP, {prefill / 1e6:,.0f} MB per boundary for one {max_model_len:,}-token prefill; a "
            "stack refuses it (gpuNodeGroup.instanceType needs EFA for pipelineParallelSize > 1)",)


def _notes(model: ModelArchitecture, gpu: GpuSpec, tp: int, kv_cache_dtype: str, kv_source: str) -> tuple[str, ...]:
    notes: list[str] = []
    if kv_source == "estimate" and (tp > CALIBRATED_MAX_TP or model.hidden_size > CALIBRATED_MAX_HIDDEN):
        notes.append(
            f"KV budget is extrapolated beyond the calibration logs (TP <= {CALIBRATED_MAX_TP}, hidden size "
            f"<= {CALIBRATED_MAX_HIDDEN:,}); pass --available-kv-gib from the first boot's "
            "'Available KV cache memory' log line before relying on it"
        )
    elif kv_source == "estimate":
        notes.append(
            "KV budget is a conservative estimate; pass --available-kv-gib from vLLM's "
            "'Available KV cache memory' log line to plan from a measurement"
        )
    if model.sliding_window_layers:
        notes.append(
            f"{model.sliding_window_layers} of {model.num_layers} layers use a "
            f"{model.sliding_window_tokens}-token sliding window but are sized as full attention; "
            "vLLM will report more KV tokens"
        )
    if model.num_kv_heads < tp:
        notes.append(f"{model.num_kv_heads} KV heads over {tp} ranks: each rank keeps a replicated head")
    if model.native_dtype == "fp8" and gpu.supports_fp8 is False:
        notes.append(f"{gpu.name} has no FP8 compute; vLLM runs this FP8 checkpoint weight-only (slower)")
    if kv_cache_dtype.startswith("fp8"):
        notes.append("fp8 KV cache without calibrated scales uses scale 1.0; check quality with evals")
    return tuple(notes)
