"""llm_serving: Pulumi components for production LLM inference with vLLM on AWS EKS.

`ServingStack(name, ServingStackArgs(...))` builds one environment from its intent: the models to serve (Hugging
Face id and pinned revision, context length, latency objectives), the GPU instance type, where weights are
staged, the edge, and which platform parts to create or take as the cluster's own. It plans every model
(tensor parallelism, KV room, cold start, probes, drains, rollout, cost) and creates what the args ask for.

The args types below are also the schema of a stack file (camelCase keys) and of the multi-language package
(`pulumi package add`, see provider/). One package per domain beneath:

platform/       Kubernetes provider, Helm and manifest helpers, pinned versions, the args base, problems
gpu/            GPU node group, device plugin, DCGM exporter and counters, GPU alerts, GPU catalog
serving/        vLLM workload, engine flags, pre-staged weights, model catalog, capacity planner
storage/        EFS, FSx for Lustre or S3 for the weights
edge/           the streaming-safe edge: Envoy Gateway, ALB or ingress-nginx, NetworkPolicies
routing/        InferencePools and endpoint pickers
scaling/        KEDA or prometheus-adapter autoscaling on queue depth and KV cache
observability/  kube-prometheus-stack, scraping, serving alerts and Grafana dashboards
verification/   the deploy gate's probe and Job
cluster/        a cluster the program creates (VPC, EKS, add-ons, CPU nodes)
stack/          ServingStack, its args, and the planners and rules over a whole stack

Each package exports its public names from its __init__.py; its modules are private to it. The layering
(checked by import-linter, see pyproject.toml) is: stack -> domain packages -> platform; domain packages
never import each other.
"""

__version__ = "0.2.0"

from llm_serving.cluster import (
    ClusterArgs,
    ClusterMode,
    ControlPlaneLogType,
    CreateClusterArgs,
    LoadBalancerControllerMode,
    NatGateways,
    NetworkPolicyEnforcement,
    SystemNodesArgs,
)
from llm_serving.edge import (
    ControllerMode,
    EdgeArgs,
    EdgeAuth,
    EdgeMode,
    ExistingGatewayArgs,
    InferenceRoutingArgs,
    JwtArgs,
    LoadBalancerScheme,
    OverloadArgs,
    TlsArgs,
)
from llm_serving.gpu import (
    AddonsArgs,
    AmiType,
    AutoRepairArgs,
    CapacityType,
    ContainerStorage,
    CustomGpuInstanceArgs,
    DcgmExporterAddonArgs,
    DevicePluginAddonArgs,
    ExistingAutoscaler,
    ExistingGpuNodesArgs,
    GpuNodeGroupArgs,
    GpuNodesMode,
    ImagePrePull,
    NodeAutoscalingArgs,
    NodeAutoscalingMode,
    NodeScalingArgs,
    PlacementStrategy,
    SubnetArgs,
    TaintEffect,
    TolerationArgs,
    TolerationOperator,
)
from llm_serving.observability import (
    GpuAlertsArgs,
    ObservabilityArgs,
    PrometheusArgs,
    PrometheusMode,
)
from llm_serving.platform.args import Environment, InstallMode
from llm_serving.scaling import (
    AutoscalingArgs,
    AutoscalingMode,
)
from llm_serving.serving import (
    AccessMode,
    CompileCacheMode,
    KvCacheDtype,
    KvOffloadArgs,
    ModelArchitectureArgs,
    ModelArgs,
    ModelScalingArgs,
    ModelStorageArgs,
    RouteArgs,
    RoutingMode,
    ScaleToZeroArgs,
    ServingArgs,
    SloArgs,
    VllmImageArgs,
    WeightsFormat,
)
from llm_serving.stack import ClusterFacts, ModelPlan, ServingStack, ServingStackArgs
from llm_serving.storage import (
    EfsArgs,
    ExistingStorageClassArgs,
    FsxLustreArgs,
    S3Args,
    StorageBackend,
    WeightsStorageArgs,
)
from llm_serving.verification import (
    VerificationArgs,
    VerificationMode,
)

__all__ = [
    "AccessMode",
    "AddonsArgs",
    "AmiType",
    "AutoRepairArgs",
    "AutoscalingArgs",
    "AutoscalingMode",
    "CapacityType",
    "ClusterArgs",
    "ClusterFacts",
    "ClusterMode",
    "CompileCacheMode",
    "ContainerStorage",
    "ControlPlaneLogType",
    "ControllerMode",
    "CreateClusterArgs",
    "CustomGpuInstanceArgs",
    "DcgmExporterAddonArgs",
    "DevicePluginAddonArgs",
    "EdgeArgs",
    "EdgeAuth",
    "EdgeMode",
    "EfsArgs",
    "Environment",
    "ExistingAutoscaler",
    "ExistingGatewayArgs",
    "ExistingGpuNodesArgs",
    "ExistingStorageClassArgs",
    "FsxLustreArgs",
    "GpuAlertsArgs",
    "GpuNodeGroupArgs",
    "GpuNodesMode",
    "ImagePrePull",
    "InferenceRoutingArgs",
    "InstallMode",
    "JwtArgs",
    "KvCacheDtype",
    "KvOffloadArgs",
    "LoadBalancerControllerMode",
    "LoadBalancerScheme",
    "ModelArchitectureArgs",
    "ModelArgs",
    "ModelPlan",
    "ModelScalingArgs",
    "ModelStorageArgs",
    "NatGateways",
    "NetworkPolicyEnforcement",
    "NodeAutoscalingArgs",
    "NodeAutoscalingMode",
    "NodeScalingArgs",
    "ObservabilityArgs",
    "OverloadArgs",
    "PlacementStrategy",
    "PrometheusArgs",
    "PrometheusMode",
    "RouteArgs",
    "RoutingMode",
    "S3Args",
    "ScaleToZeroArgs",
    "ServingArgs",
    "ServingStack",
    "ServingStackArgs",
    "SloArgs",
    "StorageBackend",
    "SubnetArgs",
    "SystemNodesArgs",
    "TaintEffect",
    "TlsArgs",
    "TolerationArgs",
    "TolerationOperator",
    "VerificationArgs",
    "VerificationMode",
    "VllmImageArgs",
    "WeightsFormat",
    "WeightsStorageArgs",
    "__version__",
]
