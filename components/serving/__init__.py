"""vLLM serving: the capacity planner and model catalog, the engine's flags and pod sizing, the
weights pre-staged on a retained volume, and each model's Deployment, Service and PDB."""

from .capacity import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_STORAGE_READ_MIB_PER_SECOND,
    KV_CACHE_DTYPE_BYTES,
    CapacityError,
    CapacityPlan,
    GpuSpec,
    plan,
)
from .deployment import VllmDeployment, VllmDeploymentArgs
from .engine import (
    CHAT_TEMPLATE_PATH,
    PORT,
    EngineSettings,
    managed_flag_conflicts,
    pod_resources,
    staged_model_path,
    staged_tokenizer_path,
    weights_volume_gib,
)
from .models import ModelArchitecture, known_model_ids, lookup_model
from .weights import ModelWeights, ModelWeightsArgs

__all__ = [
    "CHAT_TEMPLATE_PATH",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_STORAGE_READ_MIB_PER_SECOND",
    "KV_CACHE_DTYPE_BYTES",
    "PORT",
    "CapacityError",
    "CapacityPlan",
    "EngineSettings",
    "GpuSpec",
    "ModelArchitecture",
    "ModelWeights",
    "ModelWeightsArgs",
    "VllmDeployment",
    "VllmDeploymentArgs",
    "known_model_ids",
    "lookup_model",
    "managed_flag_conflicts",
    "plan",
    "pod_resources",
    "staged_model_path",
    "staged_tokenizer_path",
    "weights_volume_gib",
]
