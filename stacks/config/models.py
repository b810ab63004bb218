"""Configuration of the served models: image, revision, engine flags, routes, per-model
autoscaling and SLOs, plus the autoscaler and namespace they share.
Shapes and ranges only; the planners' checks live in stacks/checks/.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from components.platform import versions
from components.serving import DEFAULT_MAX_NUM_SEQS
from stacks.config.base import ChartVersion, ConfigModel, DnsLabel, Hostname, ImageDigest, ImageTag, PathPrefix
from stacks.config.storage import WeightsStorageConfig


class KvCacheDtype(StrEnum):
    """KV cache storage type; fp8 halves KV memory but needs evidence that quality holds."""

    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FP8 = "fp8"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"


ModelId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")]


Revision = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")]


EngineFlag = Annotated[str, StringConstraints(pattern=r"^--[a-z0-9][a-z0-9-]*(\.[a-z0-9-]+)*(=.*)?$")]


class VllmImageConfig(ConfigModel):
    """The vLLM server image, pinned by tag and optionally by digest."""

    repository: str = Field(default=versions.VLLM_IMAGE_REPOSITORY, description="Image repository.")
    tag: ImageTag = Field(default=versions.VLLM_IMAGE_TAG, description="Image tag; never `latest`.")
    digest: ImageDigest | None = Field(
        default=None, description="Image digest (`sha256:...`); when set the image is pulled by digest."
    )
    efa_capable: bool = Field(
        default=False,
        description=(
            "The image carries libfabric and aws-ofi-nccl, so NCCL can use EFA (the `vllm/vllm-openai` image does "
            "not; e.g. AWS's vLLM Deep Learning Container does). Multi-node models over EFA need it."
        ),
    )
    s3_streamer: bool | None = Field(
        default=None,
        description=(
            "The image carries the Run:ai Model Streamer with its S3 backend (`runai-model-streamer[s3]`), which "
            "`weightsStorage.backend: s3` loads with. Unset: true for `vllm/vllm-openai` (its Dockerfile installs "
            "it), false for any other repository until you say so."
        ),
    )


class CompileCacheMode(StrEnum):
    """Whether replicas share one torch.compile cache per (model, revision, engine, layout, GPU)."""

    AUTO = "auto"
    SHARED = "shared"
    OFF = "off"


class CustomModelArchitecture(ConfigModel):
    """Architecture facts for a model the built-in catalog does not know."""

    parameters_billion: float = Field(gt=0, description="Total parameters, in billions.")
    num_layers: int = Field(ge=1, description="Transformer layers holding a KV cache.")
    num_attention_heads: int = Field(ge=1, description="Query heads.")
    num_kv_heads: int = Field(ge=1, description="Key/value heads (GQA).")
    head_dim: int = Field(ge=1, description="Dimension of one attention head.")
    hidden_size: int = Field(ge=1, description="Hidden size.")
    weight_gib: float = Field(gt=0, description="Size of the checkpoint's weights, in GiB.")
    max_context_tokens: int = Field(ge=1, description="Longest context the model supports, in tokens.")
    native_dtype: str = Field(default="bfloat16", description="Storage type of the weights.")
    is_moe: bool = Field(default=False, description="Whether the model is a mixture of experts.")


class RoutingMode(StrEnum):
    """How the gateway picks a replica: by the engine's state, or at random through the Service."""

    INFERENCE_POOL = "inferencePool"
    SERVICE = "service"


class RouteConfig(ConfigModel):
    """Where the edge publishes a model's OpenAI API (`<pathPrefix>/v1/...`)."""

    host: Hostname | None = Field(default=None, description="Hostname; unset uses `edge.host`.")
    path_prefix: PathPrefix = Field(default="/", description="Path prefix before `/v1`, e.g. `/` or `/llama-70b`.")
    max_stream_seconds: int | None = Field(
        default=None,
        ge=600,  # the policy pack's floor on an edge request timeout (policies/rules.py)
        le=3600,
        description=(
            "The longest a request may run at the edge, in seconds: the route's request timeout, and what every "
            "drain on the path (vLLM's shutdown timeout, grace periods, the endpoint picker, Envoy, the load "
            "balancer's deregistration delay) lets a running stream finish through a rollout, scale-down or node "
            "replacement; unset: `maxModelLen` tokens at `slo.itlP95Seconds` after `slo.ttftP95Seconds`, plus "
            "10 %, within 600..3600 (the load balancers' longest deregistration delay)."
        ),
    )
    priority: int | None = Field(
        default=None,
        ge=-1000,
        le=1000,
        description=(
            "InferenceObjective priority of all the model's requests (routing `inferencePool`): higher leaves the "
            "picker's overload queue first; negative marks them sheddable, refused first (429) while the pool is "
            "saturated; unset: none (priority 0)."
        ),
    )
    routing: RoutingMode | None = Field(
        default=None,
        description=(
            "`inferencePool` (an endpoint picker scores replicas on prefix cache, queue and KV-cache usage) "
            "or `service` (the Service spreads requests at random); unset: `inferencePool` in gateway mode with "
            "an installed controller when the model can run more than one replica, else `service`."
        ),
    )


class ModelAutoscalingConfig(ConfigModel):
    """How one model scales: queue depth first, KV-cache usage second, never CPU or GPU utilisation."""

    min_replicas: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description=(
            "Fewest replicas; unset: `replicas`. No scale-to-zero: at zero replicas no pod reports the "
            "queue, so nothing could wake the model."
        ),
    )
    max_replicas: int | None = Field(default=None, ge=1, le=64, description="Most replicas; unset: `replicas`.")
    waiting_per_replica_target: float = Field(
        default=5, gt=0, le=10000, description="Waiting requests per replica the autoscaler aims for."
    )
    waiting_activation: float = Field(
        default=1, ge=0, le=10000, description="Waiting requests at which the queue trigger becomes active."
    )
    kv_usage_target: float = Field(
        default=0.8, gt=0, le=1, description="Mean KV-cache usage (0..1) across replicas the autoscaler aims for."
    )
    kv_usage_activation: float = Field(default=0.5, ge=0, le=1, description="KV-cache usage that activates scaling.")
    scale_down_window_seconds: int | None = Field(
        default=None,
        ge=60,
        le=3600,  # the HPA API's maximum stabilization window
        description=(
            "Load must stay low this long before a replica is removed (then one per 2 minutes); unset: the "
            "time to add a replica (a new GPU node, the image pull, the cold start and `minReadySeconds`; at "
            "least 300, at most 3600). Shorter than adding a replica takes is rejected: a burst would pay for "
            "a replica and lose it before it served."
        ),
    )
    scale_up_window_seconds: int = Field(
        default=0, ge=0, le=600, description="Stabilization before scaling up; 0 reacts at once."
    )
    ttft_target_fraction: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description=(
            "Scale out when p95 time to first token passes this fraction of `slo.ttftP95Seconds`: the queue "
            "only grows once a replica is saturated, so latency would break the SLO before it."
        ),
    )


class SloConfig(ConfigModel):
    """Latency objectives the serving alerts check."""

    ttft_p95_seconds: float = Field(default=2.0, gt=0, le=600, description="Time to first token, p95, in seconds.")
    itl_p95_seconds: float = Field(default=0.1, gt=0, le=60, description="Inter-token latency, p95, in seconds.")


class ModelConfig(ConfigModel):
    """One served model: its pinned artifacts, engine settings and replicas."""

    name: DnsLabel = Field(description="Name of the model's Kubernetes objects and its served model name.")
    model_id: ModelId = Field(description="Hugging Face repository, e.g. `meta-llama/Llama-3.1-70B-Instruct`.")
    revision: Revision = Field(description="Model revision; a 40-character commit SHA in prod and staging.")
    tokenizer_revision: Revision | None = Field(
        default=None, description="Tokenizer revision when it differs from the model's; a commit SHA in prod."
    )
    architecture: CustomModelArchitecture | None = Field(
        default=None, description="Architecture facts for a model missing from the catalog; required only then."
    )
    replicas: int = Field(default=1, ge=1, le=64, description="Serving replicas (pods), each one TP group.")
    max_model_len: int = Field(
        ge=256, le=10_000_000, description="`--max-model-len` in tokens: what the product needs, no default."
    )
    gpu_memory_utilization: float = Field(
        default=0.92, gt=0, le=0.98, description="`--gpu-memory-utilization`: fraction of GPU memory for vLLM."
    )
    tensor_parallel_size: int | Literal["auto"] = Field(
        default="auto",
        description="`--tensor-parallel-size`: 1, 2, 4 or 8, or `auto` for the smallest that leaves KV room.",
    )
    pipeline_parallel_size: int = Field(
        default=1,
        ge=1,
        le=16,
        description=(
            "`--pipeline-parallel-size`: above 1, each replica is a LeaderWorkerSet group of this many nodes, "
            "TP = the node's GPUs within each (for a model larger than one node)."
        ),
    )
    target_concurrency: int = Field(
        default=1, ge=1, le=100000, description="Requests at max-model-len the KV cache must hold (for `auto`)."
    )
    kv_cache_dtype: KvCacheDtype = Field(default=KvCacheDtype.AUTO, description="`--kv-cache-dtype`.")
    weights_format: Literal["safetensors", "pytorch", "gguf"] = Field(
        default="safetensors",
        description=(
            "How the checkpoint's weights are stored on the Hub: `safetensors` (what the staging Job fetches and "
            "the Run:ai Model Streamer reads), `pytorch` (.bin/.pt) or `gguf`; weightsStorage.backend s3 needs "
            "safetensors."
        ),
    )
    quantization: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]+$")] | None = Field(
        default=None, description="`--quantization`; unset lets vLLM read the checkpoint's own config."
    )
    quality_eval: Annotated[str, StringConstraints(min_length=3, max_length=500)] | None = Field(
        default=None,
        description="The eval (name or URL) showing quality holds with fp8 KV or quantization; required in prod.",
    )
    max_num_seqs: int = Field(
        default=DEFAULT_MAX_NUM_SEQS, ge=1, le=65536, description="`--max-num-seqs`, set explicitly."
    )
    max_num_batched_tokens: int = Field(
        default=8192, ge=256, le=1_048_576, description="`--max-num-batched-tokens`, set explicitly."
    )
    enable_prefix_caching: bool = Field(default=True, description="`--enable-prefix-caching` (or disable).")
    chat_template: str | None = Field(
        default=None, description="Jinja chat template, mounted from a ConfigMap; unset uses the tokenizer's."
    )
    shutdown_timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=3600,
        description=(
            "`--shutdown-timeout`: seconds vLLM lets in-flight requests finish on SIGTERM; unset: the route's "
            "stream bound (`route.maxStreamSeconds`). Shorter than the bound is refused: it would cut streams."
        ),
    )
    extra_args: list[EngineFlag] = Field(
        default_factory=list,
        description="Other `vllm serve` flags as `--flag` or `--flag=value`; flags set by keys above are refused.",
    )
    storage: WeightsStorageConfig = Field(
        default_factory=WeightsStorageConfig, description="The pre-staged weights volume."
    )
    compile_cache: CompileCacheMode = Field(
        default=CompileCacheMode.AUTO,
        description=(
            "`shared`: one Job compiles the model once per (revision, image, layout, GPU, engine flags) into the "
            "weights storage (on S3 an object prefix in the bucket) and every later replica copies it instead of "
            "compiling; `auto`: shared where the key is pinned, the producer may write the storage and the node "
            "group has room for the producer beside the rollout, else off; `off`: every pod compiles."
        ),
    )
    cache_volume_gib: int = Field(
        default=20,
        ge=1,
        le=1000,
        description="Per-pod disk emptyDir for HOME and the compile, kernel and Hub caches (the root "
        "filesystem is read-only).",
    )
    tmp_volume_gib: int = Field(default=8, ge=1, le=1000, description="Per-pod disk emptyDir mounted at /tmp.")
    image: VllmImageConfig = Field(default_factory=VllmImageConfig, description="The vLLM image.")
    route: RouteConfig = Field(default_factory=RouteConfig, description="How the edge publishes the model.")
    autoscaling: ModelAutoscalingConfig = Field(
        default_factory=ModelAutoscalingConfig, description="Replica bounds and scaling targets."
    )
    slo: SloConfig = Field(default_factory=SloConfig, description="Latency SLOs for the serving alerts.")


class AutoscalingMode(StrEnum):
    """KEDA with Prometheus triggers, or an HPA on prometheus-adapter metrics."""

    KEDA = "keda"
    PROMETHEUS_ADAPTER = "prometheus-adapter"


class AutoscalingConfig(ConfigModel):
    """The autoscaler installation shared by all models."""

    mode: AutoscalingMode = Field(default=AutoscalingMode.KEDA, description="`keda` or `prometheus-adapter`.")
    namespace: DnsLabel = Field(default="keda", description="Namespace of KEDA or prometheus-adapter.")
    keda_chart_version: ChartVersion = Field(default=versions.KEDA.version, description="KEDA chart version.")
    prometheus_adapter_chart_version: ChartVersion = Field(
        default=versions.PROMETHEUS_ADAPTER.version, description="prometheus-adapter chart version."
    )


class ServingConfig(ConfigModel):
    """Where the models run."""

    namespace: DnsLabel = Field(default="llm-serving", description="Namespace of the vLLM workloads.")
