"""What a stack says about its GPU capacity: the managed node group (instance type, AMI, subnets, scaling,
repair), who adds GPU nodes, and the GPU add-ons (device plugin, DCGM exporter). Shapes and ranges only;
relations are the stack's rules (llm_serving.stack.rules)."""

from enum import StrEnum

from pydantic import Field, model_validator

from llm_serving.platform import versions
from llm_serving.platform.args import (
    AVAILABILITY_ZONE,
    CAPACITY_RESERVATION_ID,
    CHART_VERSION,
    DNS_LABEL,
    IAM_ROLE_ARN,
    INSTANCE_TYPE_NAME,
    LABEL_KEY,
    LABEL_VALUE,
    SECURITY_GROUP_ID,
    SUBNET_ID,
    InstallMode,
    args_type,
    check_labels,
)

# Defaults for the dynamics; stacks override them (gpuNodeGroup.nodeReadySeconds, imagePullSeconds)
# with what they measure. No authoritative figure exists for a GPU node: a node registers about 75 s
# after launch (aws/karpenter-provider-aws#6128) and the device plugin advertises GPUs about 90 s
# later (NVIDIA/k8s-device-plugin#291); p5 adds NVMe RAID and a larger boot, so 5 minutes.
DEFAULT_NODE_READY_SECONDS = 300
# The vLLM image is about 12-13 GB compressed (vllm-project/vllm#27154); AWS measures 4-6 minutes for
# a standard pull of a 15-20 GB image (AWS ML blog, "Reducing container cold start times using SOCI
# index on DLAMI and DLC"), so 5 minutes.
DEFAULT_IMAGE_PULL_SECONDS = 300


class NodeAutoscalingMode(StrEnum):
    """Who adds and removes GPU nodes."""

    CLUSTER_AUTOSCALER = "clusterAutoscaler"
    EXISTING = "existing"
    NONE = "none"


class ExistingAutoscaler(StrEnum):
    """The node autoscaler a cluster already runs."""

    CLUSTER_AUTOSCALER = "cluster-autoscaler"
    KARPENTER = "karpenter"


@args_type
class NodeAutoscalingArgs:
    """Node autoscaling of the GPU node group."""

    mode: NodeAutoscalingMode = NodeAutoscalingMode.CLUSTER_AUTOSCALER
    """`clusterAutoscaler` installs Cluster Autoscaler for this program's GPU node groups; `existing`: the cluster
    already runs one (name it in `existing`); `none`: fixed capacity, `desiredNodes`."""
    existing: ExistingAutoscaler | None = None
    """With mode `existing`: which autoscaler runs (`cluster-autoscaler`)."""
    chart_version: str = Field(default=versions.CLUSTER_AUTOSCALER.version, **CHART_VERSION)
    """cluster-autoscaler chart version."""


@args_type
class SubnetArgs:
    """One private subnet the GPU nodes may be placed in."""

    id: str | None = Field(default=None, **SUBNET_ID)
    """Subnet id, e.g. `subnet-0123456789abcdef0`; required with cluster mode `existing`, unset with `create` (the
    created private subnet of the zone)."""
    availability_zone: str = Field(**AVAILABILITY_ZONE)
    """Availability zone of the subnet; capacity blocks need every subnet in one zone."""


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


class ImagePrePull(StrEnum):
    """How the vLLM images reach the GPU nodes before a replica needs them."""

    DAEMON_SET = "daemonSet"
    OFF = "off"


@args_type
class NodeScalingArgs:
    """Bounds of the managed node group's Auto Scaling group, in nodes."""

    min_nodes: int = Field(ge=0, le=100)
    """Fewest GPU nodes kept running."""
    max_nodes: int = Field(ge=1, le=100)
    """Most GPU nodes the group may grow to."""
    desired_nodes: int = Field(ge=0, le=100)
    """Nodes at creation; later changes by autoscalers are not reverted."""


@args_type
class CustomGpuInstanceArgs:
    """GPU facts for an instance type the built-in catalog does not know."""

    gpu_count: int = Field(ge=1, le=16)
    """GPUs per instance."""
    gpu_memory_gib: float = Field(gt=0, le=1024)
    """Memory of one GPU, in GiB."""
    gpu_product: str = Field(pattern=r"^NVIDIA-[A-Za-z0-9.-]+$")
    """GPU product label as GPU feature discovery reports it (`nvidia.com/gpu.product`)."""
    vcpus: int = Field(ge=1)
    """vCPUs per instance."""
    memory_gib: int = Field(ge=1)
    """Host memory per instance, in GiB."""
    efa_interfaces: int = Field(default=0, ge=0)
    """Maximum EFA interfaces (0: no EFA)."""
    local_nvme_gib: int = Field(default=0, ge=0)
    """Total instance-store NVMe, in GiB (0: none)."""


@args_type
class AutoRepairArgs:
    """EKS node auto repair for the GPU node group."""

    enabled: bool = True
    """Reboot or replace nodes the EKS node monitoring agent reports unhealthy (GPU Xid faults)."""
    install_monitoring_agent: bool = True
    """Install the `eks-node-monitoring-agent` add-on; false when the cluster already has it (creating an add-on that
    exists fails)."""


class GpuNodesMode(StrEnum):
    """Who provides the GPU nodes: a managed node group the stack creates, or nodes the cluster already has."""

    CREATE = "create"
    """An EKS managed node group of the stack's own, with its launch template, taint, labels, repair and updates."""
    EXISTING = "existing"
    """Nodes the cluster provides (Karpenter, EKS Auto Mode, another team's node group), chosen by labels."""


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """What a taint does to pods that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@args_type
class TolerationArgs:
    """One toleration the GPU workloads carry for the existing nodes' taints."""

    key: str = Field(**LABEL_KEY)
    """The taint's key, e.g. `nvidia.com/gpu`."""
    operator: TolerationOperator = TolerationOperator.EXISTS
    """`Exists` (any value) or `Equal` (`value`)."""
    value: str | None = Field(default=None, **LABEL_VALUE)
    """The taint's value, with operator `Equal`."""
    effect: TaintEffect | None = None
    """The taint's effect; unset tolerates every effect of the key."""

    @model_validator(mode="after")
    def _value_matches_operator(self) -> "TolerationArgs":
        # Kubernetes refuses a value with `Exists` (core/v1 Toleration: "If the operator is Exists, the value
        # should be empty"): the apply would fail after the weights are staged.
        if self.operator is TolerationOperator.EXISTS and self.value is not None:
            raise ValueError(f"a toleration of {self.key} with operator Exists takes no value (got {self.value!r}); "
                             "use operator Equal to match the value")
        return self


@args_type
class ExistingGpuNodesArgs:
    """GPU nodes the cluster already provides, and what the stack must know about them."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    """Labels that select the nodes the models run on; empty: `node.kubernetes.io/instance-type: <instanceType>`,
    the label every node carries."""
    tolerations: list[TolerationArgs] = Field(default_factory=list)
    """Tolerations for the nodes' taints; empty: the `nvidia.com/gpu` NoSchedule taint GPU node pools use (any
    value)."""
    max_nodes: int = Field(ge=1, le=100)
    """The most of these nodes the stack's models may occupy (the node pool's limit): rollouts, peaks and cost
    are planned on it."""
    node_role_arn: str | None = Field(default=None, **IAM_ROLE_ARN)
    """The nodes' IAM role: with `weightsStorage.backend: efs`, the file system's read-only principal."""
    security_group_id: str | None = Field(default=None, **SECURITY_GROUP_ID)
    """A security group the nodes carry: with `weightsStorage.backend: efs`, what the mount targets admit NFS
    from."""

    _check_node_selector = check_labels("node_selector", LABEL_KEY, LABEL_VALUE)


@args_type
class GpuNodeGroupArgs:
    """The GPU nodes that serve the models: a managed node group the stack creates, or the cluster's own."""

    mode: GpuNodesMode = GpuNodesMode.CREATE
    """`create`: an EKS managed node group of the stack's own (the keys below); `existing`: nodes the cluster
    provides (`existing`), for Karpenter or EKS Auto Mode: no node group, no Cluster Autoscaler."""
    existing: ExistingGpuNodesArgs | None = None
    """With mode `existing`: how the stack finds and tolerates the nodes."""
    instance_type: str = Field(**INSTANCE_TYPE_NAME)
    """EC2 instance type, e.g. `p5.48xlarge`, from the catalog in `llm_serving/gpu/catalog.py` (else give
    `customInstance`)."""
    custom_instance: CustomGpuInstanceArgs | None = None
    """GPU facts for an instance type missing from the catalog; required only then."""
    ami_type: AmiType = AmiType.AL2023_X86_64_NVIDIA
    """EKS AMI type; the NVIDIA variants ship the driver, container toolkit and fabric manager."""
    ami_release_version: str | None = Field(default=None, pattern="^[0-9][0-9A-Za-z.\\-_]*$")
    """Pinned EKS AMI release version (e.g. `1.34.2-20261101`); unset follows the newest release for the Kubernetes
    version at node-group creation."""
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    """ON_DEMAND, SPOT or CAPACITY_BLOCK."""
    capacity_reservation_id: str | None = Field(default=None, **CAPACITY_RESERVATION_ID)
    """Capacity reservation (`cr-...`) to launch into; required for CAPACITY_BLOCK."""
    subnets: list[SubnetArgs] = Field(default_factory=list)
    """Private subnets for the GPU nodes, each with its availability zone (mode `create`; with mode `existing`,
    the zones the nodes run in, where EFS and FSx mount targets go)."""
    scaling: NodeScalingArgs | None = None
    """Node counts: min, max and desired (mode `create`, required there)."""
    root_volume_gib: int = Field(default=200, ge=20, le=16384)
    """Root EBS volume (gp3) size in GiB; with `ebs` container storage it holds images too."""
    container_storage: ContainerStorage = ContainerStorage.INSTANCE_NVME
    """`instance-nvme` puts containerd and kubelet on the instance NVMe (RAID0), `ebs` on the root volume. NVMe needs
    an instance type with instance storage."""
    efa_interfaces: int = Field(default=0, ge=0, le=32)
    """EFA network interfaces per node (0: none). Only multi-node serving needs EFA."""
    placement: PlacementStrategy = PlacementStrategy.NONE
    """`cluster` places nodes in one cluster placement group (for EFA traffic)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra Kubernetes labels for the GPU nodes."""
    auto_repair: AutoRepairArgs = Field(default_factory=AutoRepairArgs)
    """Node auto repair."""
    ssm_access: bool = False
    """Attach AmazonSSMManagedInstanceCore to the GPU node role: SSM shells on GPU nodes (root next to the weights and
    the pods' credentials). Off unless asked."""
    node_ready_seconds: int = Field(default=DEFAULT_NODE_READY_SECONDS, ge=60, le=3600)
    """Seconds from a scale-up to a new GPU node advertising its GPUs (measure it on your account)."""
    image_pull_seconds: int = Field(default=DEFAULT_IMAGE_PULL_SECONDS, ge=0, le=3600)
    """Seconds to pull the vLLM image onto a node that does not have it."""
    image_pre_pull: ImagePrePull = ImagePrePull.DAEMON_SET
    """`daemonSet`: a pod on every GPU node pulls each model's vLLM image and keeps it in use, so a replica on a
    running node starts without a pull (a new node still pulls: the pod starts only once the node has joined);
    `off`: every replica pulls on a node that lacks the image."""
    _check_labels = check_labels("labels", LABEL_KEY, LABEL_VALUE)


@args_type
class DevicePluginAddonArgs:
    """Where and at which chart version the NVIDIA device plugin is installed, or that the cluster runs one."""

    mode: InstallMode = InstallMode.INSTALL
    """`install`: the stack installs the chart (with GPU feature discovery); `existing`: the cluster's GPU nodes
    already advertise `nvidia.com/gpu` (the NVIDIA GPU Operator, EKS Auto Mode, or a plugin of its own)."""
    namespace: str = Field(default="nvidia-device-plugin", **DNS_LABEL)
    """Namespace the chart is installed into."""
    chart_version: str = Field(default=versions.NVIDIA_DEVICE_PLUGIN.version, **CHART_VERSION)
    """nvidia-device-plugin chart version; the default is pinned in llm_serving/platform/versions.py."""


@args_type
class DcgmExporterAddonArgs:
    """Where and at which chart version the DCGM exporter is installed, or that the cluster runs one."""

    mode: InstallMode = InstallMode.INSTALL
    """`install`: the stack installs the chart with its counters, its ServiceMonitor and the GPU health alerts;
    `existing`: the cluster runs an exporter (and GPU alerts) of its own, and the stack installs none of them."""
    namespace: str = Field(default="gpu-monitoring", **DNS_LABEL)
    """Namespace the chart is installed into."""
    chart_version: str = Field(default=versions.DCGM_EXPORTER.version, **CHART_VERSION)
    """dcgm-exporter chart version; the default is pinned in llm_serving/platform/versions.py."""


@args_type
class AddonsArgs:
    """Cluster add-ons the GPU layer installs from their official charts."""

    nvidia_device_plugin: DevicePluginAddonArgs = Field(default_factory=DevicePluginAddonArgs)
    """NVIDIA device plugin with GPU feature discovery."""
    dcgm_exporter: DcgmExporterAddonArgs = Field(default_factory=DcgmExporterAddonArgs)
    """NVIDIA DCGM exporter for GPU health metrics."""
