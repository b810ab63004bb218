"""ModelAutoscaling: KEDA (or prometheus-adapter) and one autoscaler per model.

Scales each vLLM Deployment on queue depth first and KV-cache usage second, never on CPU or GPU
utilisation; scale-up is prompt, scale-down slow and one replica at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pulumi

from llm_serving.platform import RESTRICTED, helm_release, manifest_resource, namespace

from . import objects
from .args import AutoscalingMode
from .objects import ScalingTarget

# `restricted`: KEDA 2.20.2's three Deployments, rendered by `helm template` with our values, run
# non-root with seccomp RuntimeDefault, drop ALL and only secret volumes (chart values
# podSecurityContext/securityContext); prometheus-adapter 5.3.0's default securityContext is
# non-root UID 10001, seccomp RuntimeDefault, drop ALL (its values.yaml).
SCALING_POD_SECURITY = RESTRICTED


@dataclass(frozen=True)
class AutoscalingSpec:
    mode: AutoscalingMode
    namespace: str
    keda_chart_version: str
    prometheus_adapter_chart_version: str
    prometheus_url: str
    targets: tuple[ScalingTarget, ...]
    # False: the cluster runs KEDA (or prometheus-adapter) already; only the per-model objects are created.
    install: bool = True
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the chart's images with a digest there are
    # pulled by it (platform.helm_release); the others run by their chart's tag.
    image_digests: dict[str, str] = field(default_factory=dict)


def adapter_values(prometheus_url: str) -> dict:
    """prometheus-adapter values: where Prometheus is, and the vLLM rules."""
    url = urlsplit(prometheus_url)
    values = objects.prometheus_adapter_values()
    values["prometheus"] = {
        "url": f"{url.scheme}://{url.hostname}",
        "port": url.port or (443 if url.scheme == "https" else 80),
        "path": url.path or "",
    }
    return values


class ModelAutoscaling(pulumi.ComponentResource):
    """The autoscaler installation and a ScaledObject (or HPA) per model."""

    def __init__(
        self,
        name: str,
        args: AutoscalingSpec,
        opts: pulumi.ResourceOptions | None = None,
        workloads: list[pulumi.Resource] | None = None,
    ):
        super().__init__("llmserving:autoscaling:ModelAutoscaling", name, None, opts)
        keda = args.mode is AutoscalingMode.KEDA
        installed: list[pulumi.Resource] = []
        if args.install:
            ns = namespace(f"{name}-namespace", args.namespace, parent=self, pod_security=SCALING_POD_SECURITY)
            installed.append(helm_release(
                f"{name}-{'keda' if keda else 'prometheus-adapter'}",
                chart="keda" if keda else "prometheus-adapter",
                version=args.keda_chart_version if keda else args.prometheus_adapter_chart_version,
                release_namespace=ns.metadata.name,
                values=objects.keda_chart_values() if keda else adapter_values(args.prometheus_url),
                parent=self,
                image_digests=args.image_digests,
            ))
        # ScaledObjects need KEDA's CRD and their target Deployment; an HPA on adapter metrics needs
        # the metrics API to answer (an existing installation's: a checked prerequisite).
        after = pulumi.ResourceOptions(parent=self, depends_on=[*installed, *(workloads or [])])
        for target in args.targets:
            if keda:
                manifest = objects.scaled_object(
                    target, prometheus_url=args.prometheus_url, name=target.deployment_name
                )
            else:
                manifest = objects.horizontal_pod_autoscaler(target, name=target.deployment_name)
            manifest_resource(f"{name}-{target.deployment_name}", manifest, after)
        self.register_outputs({})
