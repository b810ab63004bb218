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
from .node_autoscaling import DO_NOT_DISRUPT_ANNOTATION, SAFE_TO_EVICT_ANNOTATION, image_tag_for
from .node_autoscaling import NAMESPACE as CLUSTER_AUTOSCALER_NAMESPACE
from .node_group import GpuNodeGroup, NodeGroupSpec
from .prices import Price, instance_price
from .scheduling import GPU_TAINT_KEY, NODE_GENERATION_LABEL, gpu_tolerations

__all__ = [
    "AddonsArgs",
    "AmiType",
    "AutoRepairArgs",
    "CLUSTER_AUTOSCALER_NAMESPACE",
    "CapacityType",
    "ClusterAutoscaler",
    "ClusterAutoscalerArgs",
    "ContainerStorage",
    "CustomGpuInstanceArgs",
    "DcgmExporter",
    "DcgmExporterAddonArgs",
    "DcgmExporterArgs",
    "DevicePluginAddonArgs",
    "EfaDevicePlugin",
    "EfaDevicePluginArgs",
    "ExistingAutoscaler",
    "ExistingGpuNodesArgs",
    "GpuModel",
    "GpuNodeGroup",
    "GpuNodeGroupArgs",
    "GpuNodesMode",
    "ImagePrePull",
    "InstanceType",
    "MONITORING_AGENT_ADDON",
    "NODE_GENERATION_LABEL",
    "NodeAutoscalingArgs",
    "NodeAutoscalingMode",
    "NodeDrainBarrier",
    "NodeDrainBarrierArgs",
    "NodeGroupSpec",
    "NodeScalingArgs",
    "NvidiaDevicePlugin",
    "NvidiaDevicePluginArgs",
    "PlacementStrategy",
    "Price",
    "SAFE_TO_EVICT_ANNOTATION",
    "DO_NOT_DISRUPT_ANNOTATION",
    "SubnetArgs",
    "TaintEffect",
    "TolerationArgs",
    "TolerationOperator",
    "barrier_delete_timeout_seconds",
    "barrier_grace_seconds",
    "drain_barrier_name",
    "efa_device_plugin_values",
    "exported_metric_names",
    "GPU_TAINT_KEY",
    "gpu_tolerations",
    "image_tag_for",
    "instance_price",
    "instance_type_from_spec",
    "known_instance_type_names",
    "lookup_instance_type",
    "monitoring_agent_configuration",
    "node_monitoring_agent",
]
