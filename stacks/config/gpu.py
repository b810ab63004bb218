"""Configuration of the GPU node group and its cluster add-ons (device plugin, DCGM exporter).
Shapes and ranges only; relations between fields are checked in stacks/checks/.
Feeds components/gpu through stacks/program.py.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from components.platform import versions
from components.serving import DEFAULT_IMAGE_PULL_SECONDS, DEFAULT_NODE_READY_SECONDS
from stacks.config.base import (
    CapacityReservationId,
    ChartVersion,
    ConfigModel,
    DnsLabel,
    InstanceTypeName,
    LabelKey,
    LabelValue,
)
from stacks.config.cluster import Subnet


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
    ssm_access: bool = Field(
        default=False,
        description=(
            "Attach AmazonSSMManagedInstanceCore to the GPU node role: SSM shells on GPU nodes (root next to "
            "the weights and the pods' credentials). Off unless asked."
        ),
    )
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
    image_pre_pull: ImagePrePull = Field(
        default=ImagePrePull.DAEMON_SET,
        description=(
            "`daemonSet`: a pod on every GPU node pulls each model's vLLM image and keeps it in use, so a replica "
            "on a running node starts without a pull (a new node still pulls: the pod starts only once the node "
            "has joined); `off`: every replica pulls on a node that lacks the image."
        ),
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
