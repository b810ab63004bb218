"""A serving pod's host memory, and the CPU tier of the KV cache it can hold (pure, no Pulumi import).

vLLM 0.33.0's native offloading (`--kv-offloading-size N --kv-offloading-backend native`) keeps one buffer of N GiB,
summed over the TP ranks, in a file under `/dev/shm` that every rank maps, fills page by page at start and pins
(vllm/v1/kv_offload/cpu/spec.py, shared_offload_region.py, gpu_worker.py in the 0.33.0 wheel). So the tier is
charged to the pod's memory cgroup in full from the start, through `/dev/shm`: the emptyDir's size limit grows
by the tier, and the tier must fit in the pod's memory limit beside everything else the pod holds
(opendatahub-io/kserve PR #1842: vLLM crashes on a small `/dev/shm` or is OOM-killed under the limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The engine's own host memory besides the tier: the API server, the engine core and tokenizer (the base) and
# each TP worker (CUDA context, pinned staging buffers, the Python heap). An allowance, not a measurement: the
# working set of a real pod is what to compare it with (kubectl top pod), and an explicit `kvOffload.sizeGib`
# is how to use more of the pod.
ENGINE_BASE_GIB = 16
ENGINE_PER_RANK_GIB = 8
# The planner's tier leaves the other half of what is spare for the page cache that weight loads and the
# compile cache go through, and for what the allowance above misses.
AUTO_SHARE = 0.5
# vLLM fills the region before it pins it; its own comment puts filling one file at "near 10 GiB/s"
# (v1/kv_offload/cpu/shared_offload_region.py in the 0.33.0 wheel): startup grows by the tier at that rate.
OFFLOAD_FILL_GIB_PER_SECOND = 10


@dataclass(frozen=True)
class HostMemory:
    """Where one serving pod's memory limit goes, in GiB."""

    pod_gib: int  # the pod's memory request and limit: its share of the node
    transport_gib: int  # /dev/shm for the TP workers' shared-memory transport
    engine_gib: int  # the engine's own host memory (the allowance above)
    streamer_gib: int  # the Run:ai streamer's CPU buffer (S3 weights), else 0
    tier_gib: int  # the CPU tier of the KV cache, also in /dev/shm
    lora_gib: int = 0  # LoRA adapters held in pinned host memory (`--max-cpu-loras`; llm_serving/serving/lora.py)

    @property
    def free_gib(self) -> int:
        """What the pod's limit leaves besides the tier."""
        return self.pod_gib - self.transport_gib - self.engine_gib - self.streamer_gib - self.lora_gib

    @property
    def spare_gib(self) -> int:
        """What is left with the tier in place (never negative for a plan the preview accepts)."""
        return self.free_gib - self.tier_gib

    @property
    def shm_gib(self) -> int:
        """/dev/shm's size limit: the transport and the tier."""
        return self.transport_gib + self.tier_gib


def engine_gib(tensor_parallel_size: int) -> int:
    return ENGINE_BASE_GIB + ENGINE_PER_RANK_GIB * tensor_parallel_size


def auto_tier_gib(free_gib: int) -> int:
    """The planner's tier: a share of what the pod's limit leaves free (0 when nothing is)."""
    return max(0, math.floor(free_gib * AUTO_SHARE))


def cpu_kv_tokens(tier_gib: int, kv_bytes_per_token_per_gpu: int, tensor_parallel_size: int,
                  block_size: int = 16) -> int:
    """Tokens the tier holds: the same bytes per token as the GPU cache, summed over the ranks, in whole blocks
    (vLLM sizes the CPU chunks from GPU blocks, offloading/config.py)."""
    per_token = kv_bytes_per_token_per_gpu * tensor_parallel_size
    return tier_gib * 1024**3 // (per_token * block_size) * block_size


def offload_init_seconds(tier_gib: int) -> int:
    """What filling the tier adds to a start, at the fill rate above."""
    return math.ceil(tier_gib / OFFLOAD_FILL_GIB_PER_SECOND)
