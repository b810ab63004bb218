"""GPU capacity and its health: the EKS GPU node group, the NVIDIA device plugin with GPU feature
discovery, the DCGM exporter with our counters file and GPU alerts, and the GPU instance catalog."""

from .args import (
    AddonsArgs,
    AmiType,
    AutoRepairArgs,
    CapacityType,
    ContainerStorage,
    CustomGpuInstanceArgs,
    DcgmExporterAddonArgs,
    DevicePluginAddonArgs,
    ExistingAutoscaler,
    GpuNodeGroupArgs,
    ImagePrePull,
    NodeAutoscalingArgs,
    NodeAutoscalingMode,
    NodeScalingArgs,
    PlacementStrategy,
    SubnetArgs,
)
from .catalog import GpuModel, InstanceType, instance_type_from_spec, known_instance_type_names, lookup_instance_type
from .cluster_autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from .counters import exported_metric_names
from .dcgm_exporter import DcgmExporter, DcgmExporterArgs
from .device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from .drain import barrier_delete_timeout_seconds, barrier_grace_seconds
from .drain import barrier_name as drain_barrier_name
from .drain_barrier import NodeDrainBarrier, NodeDrainBarrierArgs
from .efa import EfaDevicePlugin, EfaDevicePluginArgs, efa_device_plugin_values
from .monitoring_agent import MONITORING_AGENT_ADDON, monitoring_agent_configuration, node_monitoring_agent
from .node_autoscaling import NAMESPACE as CLUSTER_AUTOSCALER_NAMESPACE
from .node_autoscaling import SAFE_TO_EVICT_ANNOTATION, image_tag_for
from .node_group import GpuNodeGroup, NodeGroupSpec
from .prices import Price, instance_price
from .scheduling import NODE_GENERATION_LABEL

__all__ = [
    "AddonsArgs",
    "AmiType",
    "AutoRepairArgs",
    "CapacityType",
    "ContainerStorage",
    "CustomGpuInstanceArgs",
    "DcgmExporterAddonArgs",
    "DevicePluginAddonArgs",
    "ExistingAutoscaler",
    "GpuNodeGroupArgs",
    "ImagePrePull",
    "NodeAutoscalingArgs",
    "NodeAutoscalingMode",
    "NodeScalingArgs",
    "PlacementStrategy",
    "SubnetArgs",
    "NODE_GENERATION_LABEL",
    "CLUSTER_AUTOSCALER_NAMESPACE",
    "MONITORING_AGENT_ADDON",
    "monitoring_agent_configuration",
    "EfaDevicePlugin",
    "EfaDevicePluginArgs",
    "efa_device_plugin_values",
    "SAFE_TO_EVICT_ANNOTATION",
    "ClusterAutoscaler",
    "ClusterAutoscalerArgs",
    "DcgmExporter",
    "DcgmExporterArgs",
    "GpuModel",
    "GpuNodeGroup",
    "NodeGroupSpec",
    "InstanceType",
    "Price",
    "NodeDrainBarrier",
    "NodeDrainBarrierArgs",
    "NvidiaDevicePlugin",
    "NvidiaDevicePluginArgs",
    "barrier_delete_timeout_seconds",
    "barrier_grace_seconds",
    "drain_barrier_name",
    "exported_metric_names",
    "image_tag_for",
    "instance_price",
    "instance_type_from_spec",
    "known_instance_type_names",
    "lookup_instance_type",
    "node_monitoring_agent",
]
