"""EfaDevicePlugin: AWS's EFA device plugin, so pods on the GPU nodes can request their EFA interfaces.

The EKS accelerated AMIs carry the host EFA driver but not the plugin (EKS user guide,
device-management-efa). The chart's DaemonSet runs privileged with hostNetwork and
hostPath mounts, so it goes to kube-system, where AWS documents it and `system-node-critical` is
allowed; its node affinity already lists the EFA instance types (p4d, p5, p5e, p5en, p6-b200, and g5,
g6 and g6e from 8xlarge up: values.yaml supportedInstanceLabels of chart v0.5.30, aws/eks-charts @ bfe91c4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from llm_serving.platform import helm_release

from . import scheduling

EFA_NAMESPACE = "kube-system"


def efa_device_plugin_values() -> dict[str, Any]:
    """aws-efa-k8s-device-plugin v0.5.30 values: tolerate the GPU taint (the chart tolerates only
    CriticalAddonsOnly, so it would never run on the tainted GPU nodes)."""
    return {"tolerations": scheduling.gpu_tolerations()}


@dataclass(frozen=True)
class EfaDevicePluginArgs:
    chart_version: str
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the chart's images with a digest there are
    # pulled by it (platform.helm_release); the others run by their chart's tag.
    image_digests: dict[str, str] = field(default_factory=dict)


class EfaDevicePlugin(pulumi.ComponentResource):
    """Advertises `vpc.amazonaws.com/efa` on the GPU nodes."""

    def __init__(self, name: str, args: EfaDevicePluginArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:gpu:EfaDevicePlugin", name, None, opts)
        self.release = helm_release(
            f"{name}-release",
            chart="aws-efa-k8s-device-plugin",
            version=args.chart_version,
            release_namespace=EFA_NAMESPACE,
            values=efa_device_plugin_values(),
            parent=self,
            image_digests=args.image_digests,
        )
        self.register_outputs({})
