"""NvidiaDevicePlugin: the official nvidia-device-plugin chart with GPU feature discovery.

Advertises `nvidia.com/gpu` to the scheduler (EKS AL2023 NVIDIA AMIs do not ship the plugin) and,
through GFD, labels each node with its GPU product; scheduled only on the GPU nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from llm_serving.platform import PodSecurity, helm_release, namespace

from . import scheduling

# The device plugin registers with the kubelet through a hostPath socket directory, and GPU feature
# discovery runs privileged (nvidia-device-plugin 0.20.0 values: gfd securityContext privileged: true).
DEVICE_PLUGIN_POD_SECURITY = PodSecurity(
    "privileged", "gpu-feature-discovery runs privileged; the device plugin mounts the kubelet socket (hostPath)"
)


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    namespace: str
    chart_version: str
    # Existing GPU nodes: their selector and tolerations; None: the created group's (scheduling.py).
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, str]] | None = None
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the chart's images with a digest there are
    # pulled by it (platform.helm_release); the others run by their chart's tag.
    image_digests: dict[str, str] = field(default_factory=dict)


class NvidiaDevicePlugin(pulumi.ComponentResource):
    """Device plugin + GFD + NFD, tolerating the GPU taint and selecting the GPU nodes."""

    namespace: pulumi.Output[str]
    release_name: pulumi.Output[str | None]  # as the SDK types a Release's name (helm_release always sets it)

    def __init__(
        self, name: str, args: NvidiaDevicePluginArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("llmserving:gpu:NvidiaDevicePlugin", name, None, opts)
        ns = namespace(f"{name}-namespace", args.namespace, parent=self, pod_security=DEVICE_PLUGIN_POD_SECURITY)
        release: k8s.helm.v3.Release = helm_release(
            f"{name}-release",
            chart="nvidia-device-plugin",
            version=args.chart_version,
            release_namespace=ns.metadata.name,
            values=scheduling.device_plugin_values(args.node_selector, args.tolerations),
            parent=self,
            image_digests=args.image_digests,
        )
        self.namespace = ns.metadata.name
        self.release_name = release.name
        self.register_outputs({"namespace": self.namespace, "release_name": self.release_name})
