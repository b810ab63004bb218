"""GPU capacity and its health: the EKS GPU node group, the NVIDIA device plugin with GPU feature
discovery, the DCGM exporter with our counters file and GPU alerts, and the GPU instance catalog."""

from .catalog import GpuModel, InstanceType, instance_type_from_spec, known_instance_type_names, lookup_instance_type
from .counters import exported_metric_names
from .dcgm_exporter import DcgmExporter, DcgmExporterArgs
from .device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from .node_group import GpuNodeGroup, GpuNodeGroupArgs

__all__ = [
    "DcgmExporter",
    "DcgmExporterArgs",
    "GpuModel",
    "GpuNodeGroup",
    "GpuNodeGroupArgs",
    "InstanceType",
    "NvidiaDevicePlugin",
    "NvidiaDevicePluginArgs",
    "exported_metric_names",
    "instance_type_from_spec",
    "known_instance_type_names",
    "lookup_instance_type",
]
