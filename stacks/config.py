"""Typed model of one stack's configuration (the `llm-serving:*` keys of `Pulumi.<stack>.yaml`).

pydantic checks shapes, types and ranges; `stacks.checks` checks relations between fields. Both
report problems as one line per key path, before a single resource is registered.

Length: the whole configuration schema in key order; the reference generator and a reader see the
tree as a stack file has it, and cross-field rules live apart in checks.py.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints
from pydantic.alias_generators import to_camel

from components.platform import versions
from components.serving import DEFAULT_IMAGE_PULL_SECONDS, DEFAULT_NODE_READY_SECONDS

# A Kubernetes label/annotation-safe DNS-1123 name: namespaces, release names.
DnsLabel = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=63)
]
KubernetesVersion = Annotated[str, StringConstraints(pattern=r"^1\.(2[89]|3[0-9])$")]
ChartVersion = Annotated[str, StringConstraints(pattern=r"^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")]
SubnetId = Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]{8,17}$")]
AvailabilityZone = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")]
CapacityReservationId = Annotated[str, StringConstraints(pattern=r"^cr-[0-9a-f]{8,17}$")]
LabelKey = Annotated[
    str,
    StringConstraints(pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"),
]
LabelValue = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")]
InstanceTypeName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")]
HttpsUrl = Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$")]


class ConfigModel(BaseModel):
    """Base for every config section: unknown keys rejected, values frozen, camelCase in YAML."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_enum_values=False,
    )


class Environment(StrEnum):
    """Which rules apply: prod and staging must pin everything; only prod protects data."""

    DEV = "dev"
    STAGING = "staging"
    PROD = "prod"


class CapacityType(StrEnum):
    """How EC2 capacity for the GPU nodes is bought."""

    ON_DEMAND = "ON_DEMAND"
    SPOT = "SPOT"
    CAPACITY_BLOCK = "CAPACITY_BLOCK"


class AmiType(StrEnum):
    """EKS-optimised GPU AMI families that carry the NVIDIA driver and container toolkit."""

    AL2023_X86_64_NVIDIA = "AL2023_x86_64_NVIDIA"
    BOTTLEROCKET_X86_64_NVIDIA = "BOTTLEROCKET_x86_64_NVIDIA"


class ContainerStorage(StrEnum):
    """Where containerd keeps images and pod scratch space on a GPU node."""

    INSTANCE_NVME = "instance-nvme"
    EBS = "ebs"


class PlacementStrategy(StrEnum):
    """EC2 placement group for the node group (cluster packs nodes for EFA/NCCL bandwidth)."""

    NONE = "none"
    CLUSTER = "cluster"


class PrometheusMode(StrEnum):
    """Install a Prometheus Operator stack, or use one the cluster already runs."""

    INSTALL = "install"
    EXISTING = "existing"


class KvCacheDtype(StrEnum):
    """KV cache storage type; fp8 halves KV memory but needs evidence that quality holds."""

    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FP8 = "fp8"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"


class AccessMode(StrEnum):
    """How the weights volume is shared: many replicas need ReadWriteMany (e.g. EFS)."""

    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE = "ReadWriteOnce"


ModelId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")]
Revision = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")]
ImageTag = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")]
ImageDigest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
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


class WeightsStorageConfig(ConfigModel):
    """One model's weights claim on the stack's weights storage (`weightsStorage`)."""

    access_mode: AccessMode = Field(
        default=AccessMode.READ_WRITE_MANY,
        description=(
            "ReadWriteMany lets every replica, on any node, mount the same weights. ReadWriteOnce (an EBS "
            "class under `existingStorageClass`) allows one replica, pinned to the node group's first zone."
        ),
    )
    size_gib: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description=(
            "Claim size in GiB, required with `existingStorageClass` (EFS ignores it; FSx uses the file system's "
            "capacity). Size it for two revisions; never lower it for an existing claim: Kubernetes refuses."
        ),
    )


class StorageBackend(StrEnum):
    """Where the weights live."""

    EFS = "efs"
    FSX_LUSTRE = "fsxLustre"
    EXISTING_STORAGE_CLASS = "existingStorageClass"


class EfsStorageConfig(ConfigModel):
    """The EFS file system this program creates for the weights."""

    install_csi_driver: bool = Field(
        default=True,
        description="Install the `aws-efs-csi-driver` EKS add-on; false when the cluster already has it.",
    )


class FsxLustreConfig(ConfigModel):
    """The FSx for Lustre (PERSISTENT_2) file system this program creates for the weights."""

    storage_capacity_gib: int = Field(
        default=2400, ge=1200, le=4_000_000,
        description="Capacity in GiB: 1200, 2400 or a multiple of 2400; read speed grows with it.",
    )
    per_unit_storage_throughput: Literal[125, 250, 500, 1000] = Field(
        default=500, description="MB/s per TiB of capacity (125, 250, 500 or 1000); sets the read speed and price."
    )
    install_csi_driver: bool = Field(
        default=True,
        description="Install the `aws-fsx-csi-driver` EKS add-on; false when the cluster already has it.",
    )


class ExistingStorageClassConfig(ConfigModel):
    """A StorageClass the cluster already has, and the read speed its operator vouches for."""

    name: DnsLabel = Field(description="StorageClass name.")
    read_mib_per_second: float = Field(
        gt=0, le=100000, description="Sustained read MiB/s one pod gets; sizes cold starts and startup probes."
    )


class WeightsBackendConfig(ConfigModel):
    """The storage every model's weights are pre-staged on."""

    backend: StorageBackend = Field(
        default=StorageBackend.EFS,
        description=(
            "`efs`: an encrypted EFS file system with Elastic throughput, created and retained by this program; "
            "`fsxLustre`: an FSx for Lustre file system, the fastest cold starts; `existingStorageClass`: a class "
            "the cluster has."
        ),
    )
    efs: EfsStorageConfig = Field(default_factory=EfsStorageConfig, description="With backend `efs`.")
    fsx_lustre: FsxLustreConfig = Field(default_factory=FsxLustreConfig, description="With backend `fsxLustre`.")
    existing_storage_class: ExistingStorageClassConfig | None = Field(
        default=None, description="With backend `existingStorageClass`: the class and its read speed."
    )
    max_cold_start_seconds: int = Field(
        default=3600,
        ge=300,
        le=6 * 3600,
        description="Longest planned cold start a model may have on this storage; longer is rejected.",
    )


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


Hostname = Annotated[
    str,
    StringConstraints(
        max_length=253, pattern=r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
    ),
]
PathPrefix = Annotated[str, StringConstraints(pattern=r"^/([a-z0-9][-a-z0-9._]*(/[a-z0-9][-a-z0-9._]*)*)?$")]


class RoutingMode(StrEnum):
    """How the gateway picks a replica: by the engine's state, or at random through the Service."""

    INFERENCE_POOL = "inferencePool"
    SERVICE = "service"


class RouteConfig(ConfigModel):
    """Where the edge publishes a model's OpenAI API (`<pathPrefix>/v1/...`)."""

    host: Hostname | None = Field(default=None, description="Hostname; unset uses `edge.host`.")
    path_prefix: PathPrefix = Field(default="/", description="Path prefix before `/v1`, e.g. `/` or `/llama-70b`.")
    request_timeout_seconds: int = Field(
        default=0,
        ge=0,
        le=86400,
        description="Whole-request timeout at the edge; 0 disables it (long generations), the idle timeout remains.",
    )
    priority: int | None = Field(
        default=None,
        ge=-1000,
        le=1000,
        description=(
            "InferenceObjective priority of all the model's requests (routing `inferencePool`): negative marks them "
            "sheddable, so the picker answers 429 while the pool is saturated instead of queueing them; unset: none."
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
            "planned cold start (at least 300, at most 3600). Shorter than the cold start is rejected: a "
            "burst would pay a cold start and lose the replica before it served."
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
    quantization: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]+$")] | None = Field(
        default=None, description="`--quantization`; unset lets vLLM read the checkpoint's own config."
    )
    quality_eval: Annotated[str, StringConstraints(min_length=3, max_length=500)] | None = Field(
        default=None,
        description="The eval (name or URL) showing quality holds with fp8 KV or quantization; required in prod.",
    )
    max_num_seqs: int = Field(default=256, ge=1, le=65536, description="`--max-num-seqs`, set explicitly.")
    max_num_batched_tokens: int = Field(
        default=8192, ge=256, le=1_048_576, description="`--max-num-batched-tokens`, set explicitly."
    )
    enable_prefix_caching: bool = Field(default=True, description="`--enable-prefix-caching` (or disable).")
    chat_template: str | None = Field(
        default=None, description="Jinja chat template, mounted from a ConfigMap; unset uses the tokenizer's."
    )
    shutdown_timeout_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="`--shutdown-timeout`: seconds vLLM lets in-flight requests finish on SIGTERM.",
    )
    extra_args: list[EngineFlag] = Field(
        default_factory=list,
        description="Other `vllm serve` flags as `--flag` or `--flag=value`; flags set by keys above are refused.",
    )
    storage: WeightsStorageConfig = Field(
        default_factory=WeightsStorageConfig, description="The pre-staged weights volume."
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


class EdgeMode(StrEnum):
    """What publishes the models: Gateway API (Envoy Gateway), an AWS ALB, or legacy ingress-nginx."""

    GATEWAY = "gateway"
    ALB = "alb"
    INGRESS_NGINX = "ingress-nginx"


class EdgeAuth(StrEnum):
    """Who checks credentials: vLLM's own API key, or the gateway (API keys or JWT)."""

    VLLM_API_KEY = "vllm-api-key"
    GATEWAY_API_KEY = "gateway-api-key"
    JWT = "jwt"


class ControllerMode(StrEnum):
    """Install the edge controller from its chart, or use one the cluster already runs."""

    INSTALL = "install"
    EXISTING = "existing"


class LoadBalancerScheme(StrEnum):
    INTERNAL = "internal"
    INTERNET_FACING = "internet-facing"


AcmCertificateArn = Annotated[
    str, StringConstraints(pattern=r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]+$")
]
IamRoleArn = Annotated[str, StringConstraints(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")]


class TlsConfig(ConfigModel):
    """Where the edge's certificate comes from."""

    secret_name: DnsLabel | None = Field(default=None, description="Existing TLS Secret in the edge namespace.")
    cert_manager_issuer: DnsLabel | None = Field(
        default=None, description="cert-manager ClusterIssuer that issues the certificate."
    )
    acm_certificate_arn: AcmCertificateArn | None = Field(
        default=None, description="ACM certificate ARN (alb mode)."
    )


class JwtConfig(ConfigModel):
    issuer: HttpsUrl = Field(description="Expected `iss` of client tokens.")
    jwks_uri: HttpsUrl = Field(description="Where the gateway fetches the signing keys.")


class InferenceRoutingConfig(ConfigModel):
    """The endpoint pickers and Envoy AI Gateway behind `routing: inferencePool` routes."""

    picker_replicas: int = Field(
        default=2, ge=1, le=10,
        description="Endpoint-picker replicas per model; the gateway fails closed without one, so 2+ outside dev.",
    )
    picker_cpu_request: Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?m?$")] = Field(
        default="2", description="CPU request of each picker (scores every request; upstream's chart asks 8)."
    )
    picker_memory_request_mib: int = Field(
        default=4096, ge=256, le=65536, description="Memory request of each picker in MiB."
    )
    picker_memory_limit_mib: int = Field(
        default=8192, ge=256, le=131072, description="Memory limit of each picker in MiB (its prefix index lives here)."
    )
    picker_image_digest: ImageDigest | None = Field(
        default=None,
        description="Digest of the pinned endpoint-picker image (`sha256:...`); the policy pack asks for it in prod.",
    )
    ai_gateway_chart_version: ChartVersion = Field(
        default=versions.AI_GATEWAY.version, description="ai-gateway-helm chart version."
    )
    ai_gateway_crds_chart_version: ChartVersion = Field(
        default=versions.AI_GATEWAY_CRDS.version, description="ai-gateway-crds-helm chart version."
    )


class EdgeConfig(ConfigModel):
    """The streaming-safe edge in front of the models."""

    mode: EdgeMode = Field(default=EdgeMode.GATEWAY, description="`gateway` (default), `alb` or `ingress-nginx`.")
    controller: ControllerMode = Field(
        default=ControllerMode.INSTALL, description="Install the controller's chart, or use an existing one."
    )
    namespace: DnsLabel | None = Field(
        default=None,
        description=(
            "Namespace of the edge controller (and its proxies); unset: `envoy-gateway-system` (gateway), "
            "`kube-system` (alb), `ingress-nginx` (ingress-nginx)."
        ),
    )
    envoy_gateway_chart_version: ChartVersion = Field(
        default=versions.ENVOY_GATEWAY.version, description="gateway-helm chart version (gateway mode)."
    )
    alb_controller_chart_version: ChartVersion = Field(
        default=versions.AWS_LOAD_BALANCER_CONTROLLER.version,
        description="aws-load-balancer-controller chart version (alb mode with `install`).",
    )
    alb_controller_role_arn: IamRoleArn | None = Field(
        default=None, description="IAM role for the ALB controller's service account (alb mode with `install`)."
    )
    host: Hostname = Field(description="Default hostname of the model APIs.")
    scheme: LoadBalancerScheme = Field(
        default=LoadBalancerScheme.INTERNAL, description="`internal` (default) or `internet-facing` load balancer."
    )
    tls: TlsConfig = Field(default_factory=TlsConfig, description="Certificate source.")
    auth: EdgeAuth = Field(default=EdgeAuth.VLLM_API_KEY, description="Who checks client credentials.")
    jwt: JwtConfig | None = Field(default=None, description="JWT provider (auth `jwt`).")
    stream_idle_timeout_seconds: int = Field(
        default=300, ge=10, le=3600, description="Longest silence allowed inside a response stream."
    )
    min_decode_tokens_per_second: float = Field(
        default=10, gt=0, le=10000,
        description="Slowest decode speed to allow for: timeouts must cover max-model-len tokens at this speed.",
    )
    inference_routing: InferenceRoutingConfig = Field(
        default_factory=InferenceRoutingConfig,
        description="Endpoint pickers and Envoy AI Gateway for models routed through an InferencePool.",
    )


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


class NodeAutoscalingMode(StrEnum):
    """Who adds and removes GPU nodes."""

    CLUSTER_AUTOSCALER = "clusterAutoscaler"
    EXISTING = "existing"
    NONE = "none"


class ExistingAutoscaler(StrEnum):
    """The node autoscaler a cluster already runs."""

    CLUSTER_AUTOSCALER = "cluster-autoscaler"
    KARPENTER = "karpenter"


class NodeAutoscalingConfig(ConfigModel):
    """Node autoscaling of the GPU node group."""

    mode: NodeAutoscalingMode = Field(
        default=NodeAutoscalingMode.CLUSTER_AUTOSCALER,
        description=(
            "`clusterAutoscaler` installs Cluster Autoscaler for this program's GPU node groups; `existing`: "
            "the cluster already runs one (name it in `existing`); `none`: fixed capacity, `desiredNodes`."
        ),
    )
    existing: ExistingAutoscaler | None = Field(
        default=None, description="With mode `existing`: which autoscaler runs (`cluster-autoscaler`)."
    )
    chart_version: ChartVersion = Field(
        default=versions.CLUSTER_AUTOSCALER.version, description="cluster-autoscaler chart version."
    )


class ClusterConfig(ConfigModel):
    """The existing EKS cluster this stack attaches GPU capacity and workloads to."""

    name: Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")] = Field(
        description="Name of the existing EKS cluster (looked up, never created, by this program)."
    )
    kubernetes_version: KubernetesVersion = Field(
        default=versions.DEFAULT_KUBERNETES_VERSION,
        description=(
            "Kubernetes minor version of the cluster, e.g. `1.34`; a preview fails when the looked-up "
            "cluster runs another. Objects are validated against this version's OpenAPI schema, the node "
            "group runs it, and Cluster Autoscaler's image follows it."
        ),
    )


class Subnet(ConfigModel):
    """One private subnet the GPU nodes may be placed in."""

    id: SubnetId = Field(description="Subnet id, e.g. `subnet-0123456789abcdef0`.")
    availability_zone: AvailabilityZone = Field(
        description="Availability zone of the subnet; capacity blocks need every subnet in one zone."
    )


class ScalingConfig(ConfigModel):
    """Bounds of the managed node group's Auto Scaling group, in nodes."""

    min_nodes: int = Field(ge=0, le=100, description="Fewest GPU nodes kept running.")
    max_nodes: int = Field(ge=1, le=100, description="Most GPU nodes the group may grow to.")
    desired_nodes: int = Field(
        ge=0, le=100, description="Nodes at creation; later changes by autoscalers are not reverted."
    )


class CustomGpuInstance(ConfigModel):
    """GPU facts for an instance type the built-in catalog does not know."""

    gpu_count: int = Field(ge=1, le=16, description="GPUs per instance.")
    gpu_memory_gib: float = Field(gt=0, le=1024, description="Memory of one GPU, in GiB.")
    gpu_product: Annotated[str, StringConstraints(pattern=r"^NVIDIA-[A-Za-z0-9.-]+$")] = Field(
        description="GPU product label as GPU feature discovery reports it (`nvidia.com/gpu.product`)."
    )
    vcpus: int = Field(ge=1, description="vCPUs per instance.")
    memory_gib: int = Field(ge=1, description="Host memory per instance, in GiB.")
    efa_interfaces: int = Field(default=0, ge=0, description="Maximum EFA interfaces (0: no EFA).")
    local_nvme_gib: int = Field(default=0, ge=0, description="Total instance-store NVMe, in GiB (0: none).")


class AutoRepairConfig(ConfigModel):
    """EKS node auto repair for the GPU node group."""

    enabled: bool = Field(
        default=True,
        description="Reboot or replace nodes the EKS node monitoring agent reports unhealthy (GPU Xid faults).",
    )
    install_monitoring_agent: bool = Field(
        default=True,
        description=(
            "Install the `eks-node-monitoring-agent` add-on; false when the cluster already has it (creating "
            "an add-on that exists fails)."
        ),
    )


class GpuNodeGroupConfig(ConfigModel):
    """The EKS managed node group of GPU instances that serves the models."""

    instance_type: InstanceTypeName = Field(
        description=(
            "EC2 instance type, e.g. `p5.48xlarge`, from the catalog in `components/gpu/catalog.py` (else give "
            "`customInstance`)."
        )
    )
    custom_instance: CustomGpuInstance | None = Field(
        default=None,
        description="GPU facts for an instance type missing from the catalog; required only then.",
    )
    ami_type: AmiType = Field(
        default=AmiType.AL2023_X86_64_NVIDIA,
        description="EKS AMI type; the NVIDIA variants ship the driver, container toolkit and fabric manager.",
    )
    ami_release_version: Annotated[str, StringConstraints(pattern=r"^[0-9][0-9A-Za-z.\-_]*$")] | None = (
        Field(
            default=None,
            description=(
                "Pinned EKS AMI release version (e.g. `1.34.2-20261101`); unset follows the newest "
                "release for the Kubernetes version at node-group creation."
            ),
        )
    )
    capacity_type: CapacityType = Field(
        default=CapacityType.ON_DEMAND, description="ON_DEMAND, SPOT or CAPACITY_BLOCK."
    )
    capacity_reservation_id: CapacityReservationId | None = Field(
        default=None,
        description="Capacity reservation (`cr-...`) to launch into; required for CAPACITY_BLOCK.",
    )
    subnets: list[Subnet] = Field(
        min_length=1, description="Private subnets for the GPU nodes, each with its availability zone."
    )
    scaling: ScalingConfig = Field(description="Node counts: min, max and desired.")
    root_volume_gib: int = Field(
        default=200,
        ge=20,
        le=16384,
        description=(
            "Root EBS volume (gp3) size in GiB; with `ebs` container storage it holds images too."
        ),
    )
    container_storage: ContainerStorage = Field(
        default=ContainerStorage.INSTANCE_NVME,
        description=(
            "`instance-nvme` puts containerd and kubelet on the instance NVMe (RAID0), `ebs` on the root "
            "volume. NVMe needs an instance type with instance storage."
        ),
    )
    efa_interfaces: int = Field(
        default=0,
        ge=0,
        le=32,
        description="EFA network interfaces per node (0: none). Only multi-node serving needs EFA.",
    )
    placement: PlacementStrategy = Field(
        default=PlacementStrategy.NONE,
        description="`cluster` places nodes in one cluster placement group (for EFA traffic).",
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="Extra Kubernetes labels for the GPU nodes."
    )
    auto_repair: AutoRepairConfig = Field(default_factory=AutoRepairConfig, description="Node auto repair.")
    node_ready_seconds: int = Field(
        default=DEFAULT_NODE_READY_SECONDS,
        ge=60,
        le=3600,
        description="Seconds from a scale-up to a new GPU node advertising its GPUs (measure it on your account).",
    )
    image_pull_seconds: int = Field(
        default=DEFAULT_IMAGE_PULL_SECONDS,
        ge=0,
        le=3600,
        description="Seconds to pull the vLLM image onto a node that does not have it.",
    )


class DevicePluginAddon(ConfigModel):
    """Where and at which chart version the NVIDIA device plugin is installed."""

    namespace: DnsLabel = Field(
        default="nvidia-device-plugin", description="Namespace the chart is installed into."
    )
    chart_version: ChartVersion = Field(
        default=versions.NVIDIA_DEVICE_PLUGIN.version,
        description="nvidia-device-plugin chart version; the default is pinned in components/platform/versions.py.",
    )


class DcgmExporterAddon(ConfigModel):
    """Where and at which chart version the DCGM exporter is installed."""

    namespace: DnsLabel = Field(default="gpu-monitoring", description="Namespace the chart is installed into.")
    chart_version: ChartVersion = Field(
        default=versions.DCGM_EXPORTER.version,
        description="dcgm-exporter chart version; the default is pinned in components/platform/versions.py.",
    )


class AddonsConfig(ConfigModel):
    """Cluster add-ons the GPU layer installs from their official charts."""

    nvidia_device_plugin: DevicePluginAddon = Field(
        default_factory=DevicePluginAddon,
        description="NVIDIA device plugin with GPU feature discovery.",
    )
    dcgm_exporter: DcgmExporterAddon = Field(
        default_factory=DcgmExporterAddon, description="NVIDIA DCGM exporter for GPU health metrics."
    )


class PrometheusConfig(ConfigModel):
    """The Prometheus Operator that scrapes the GPU and serving metrics."""

    mode: PrometheusMode = Field(
        default=PrometheusMode.EXISTING,
        description="`install` a kube-prometheus-stack, or use an `existing` Prometheus Operator.",
    )
    namespace: DnsLabel = Field(
        default="monitoring", description="Namespace of Prometheus (installed or existing)."
    )
    chart_version: ChartVersion = Field(
        default=versions.KUBE_PROMETHEUS_STACK.version,
        description="kube-prometheus-stack chart version when `mode` is `install`.",
    )
    url: HttpsUrl | None = Field(
        default=None,
        description="Prometheus query URL; required with `existing`, derived with `install`.",
    )
    monitor_selector_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description=(
            "Labels every ServiceMonitor, PodMonitor and PrometheusRule must carry for the existing "
            "Prometheus to select it (its `serviceMonitorSelector` / `ruleSelector`)."
        ),
    )


class GpuAlertsConfig(ConfigModel):
    """Thresholds of the GPU health alerts."""

    temperature_celsius: int = Field(
        default=85, ge=60, le=100, description="GPU temperature that raises an alert after 5 minutes."
    )
    throttle_minutes: int = Field(
        default=10, ge=1, le=120, description="Minutes of thermal or power throttling before alerting."
    )
    exporter_absent_minutes: int = Field(
        default=5, ge=1, le=60, description="Minutes a GPU node's exporter may be silent before alerting."
    )


class ObservabilityConfig(ConfigModel):
    """Metrics, alerts and runbooks."""

    prometheus: PrometheusConfig = Field(
        default_factory=PrometheusConfig, description="Prometheus wiring."
    )
    runbook_base_url: HttpsUrl = Field(
        description="Base URL of the runbooks; each alert links to `<base>#<alert-name>`."
    )
    gpu_alerts: GpuAlertsConfig = Field(
        default_factory=GpuAlertsConfig, description="GPU health alert thresholds."
    )


class StackConfig(ConfigModel):
    """Everything one stack (environment) of llm-serving is built from."""

    environment: Environment = Field(
        description="`dev`, `staging` or `prod`: prod and staging must pin everything; prod protects data."
    )
    cluster: ClusterConfig = Field(description="The existing EKS cluster.")
    gpu_node_group: GpuNodeGroupConfig = Field(description="The GPU node group.")
    node_autoscaling: NodeAutoscalingConfig = Field(
        default_factory=NodeAutoscalingConfig, description="Who adds and removes GPU nodes."
    )
    weights_storage: WeightsBackendConfig = Field(
        default_factory=WeightsBackendConfig, description="Where model weights are pre-staged."
    )
    addons: AddonsConfig = Field(default_factory=AddonsConfig, description="Cluster add-ons.")
    observability: ObservabilityConfig = Field(description="Metrics, alerts and runbooks.")
    serving: ServingConfig = Field(default_factory=ServingConfig, description="Where the models run.")
    edge: EdgeConfig = Field(description="The streaming-safe edge.")
    autoscaling: AutoscalingConfig = Field(
        default_factory=AutoscalingConfig, description="The autoscaler shared by all models."
    )
    models: list[ModelConfig] = Field(min_length=1, description="The served models, merged by `name` in clones.")
    api_key: SecretStr = Field(
        min_length=16,
        description="Secret. API key clients must present (vLLM `--api-key`, from a Kubernetes Secret).",
    )
    hf_token: SecretStr | None = Field(
        default=None,
        min_length=8,
        description="Secret. Hugging Face token for gated models, used only by the weight pre-staging Job.",
    )
    grafana_admin_password: SecretStr | None = Field(
        default=None,
        min_length=16,
        description=(
            "Secret. Grafana admin password for an installed Prometheus stack (required with "
            "`observability.prometheus.mode: install`; the chart's default password is public)."
        ),
    )

    @property
    def production_like(self) -> bool:
        return self.environment in (Environment.STAGING, Environment.PROD)


# Keys handled by the loader rather than the model.
LOADER_KEYS = ("extends",)

# Top-level keys that hold secrets: never inherited through `extends`, always `secure:` values.
SECRET_KEYS: tuple[str, ...] = ("apiKey", "grafanaAdminPassword", "hfToken")

