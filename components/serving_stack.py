"""ServingStack: composes the GPU capacity, its add-ons and observability into one component.

The only component `__main__.py` creates. It receives the stack's Kubernetes provider through
`opts` and passes it on by parenting; it builds no provider of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.dcgm_exporter import DcgmExporter, DcgmExporterArgs
from components.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from components.nvidia_device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from components.prometheus_stack import PrometheusStack, PrometheusStackArgs


@dataclass(frozen=True)
class ServingStackArgs:
    node_group_name: str
    node_group: GpuNodeGroupArgs
    device_plugin: NvidiaDevicePluginArgs
    dcgm_exporter: DcgmExporterArgs
    prometheus: PrometheusStackArgs | None  # None: use the cluster's existing Prometheus Operator
    prometheus_url: str | None


class ServingStack(pulumi.ComponentResource):
    """Everything one environment of llm-serving creates."""

    gpu_node_group: GpuNodeGroup
    prometheus_url: pulumi.Output[str]

    def __init__(self, name: str, args: ServingStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:stack:ServingStack", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.gpu_node_group = GpuNodeGroup(args.node_group_name, args.node_group, child)
        prometheus = None
        if args.prometheus is not None:
            prometheus = PrometheusStack("prometheus", args.prometheus, child)
        NvidiaDevicePlugin("nvidia-device-plugin", args.device_plugin, child)
        DcgmExporter(
            "dcgm-exporter",
            args.dcgm_exporter,
            child,
            crds_from=[prometheus.release] if prometheus else None,
        )
        self.prometheus_url = (
            prometheus.url if prometheus else pulumi.Output.from_input(args.prometheus_url or "")
        )
        self.register_outputs(
            {
                "gpu_node_selector": self.gpu_node_group.node_selector,
                "gpu_tolerations": self.gpu_node_group.tolerations,
                "gpus_per_node": self.gpu_node_group.gpus_per_node,
                "max_gpus": self.gpu_node_group.max_gpus,
                "prometheus_url": self.prometheus_url,
            }
        )
