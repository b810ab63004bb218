"""LeaderWorkerSetController: the LeaderWorkerSet operator, for models whose replicas span nodes.

kubernetes-sigs/lws v0.10.0 from its official chart (oci://registry.k8s.io/lws/charts/lws), in
namespace `lws-system` under the release name `lws`: its CRD's conversion webhook names the Service
`lws-webhook-service` in that namespace. The controller rotates its own webhook certificate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from llm_serving.platform import RESTRICTED, helm_release, namespace

LWS_NAMESPACE = "lws-system"
# `restricted`: the chart's controller runs as 65532 with a read-only root and drops ALL; the chart
# leaves out the seccomp profile, which lws_values adds (checked with `helm template` at v0.10.0).
LWS_POD_SECURITY = RESTRICTED


def lws_values() -> dict[str, Any]:
    """lws chart v0.10.0 values."""
    return {
        # Its pod webhooks fail closed for pods of a LeaderWorkerSet: with the only controller down, a
        # group that restarts cannot be recreated. Two replicas, one leader (leader election is on).
        "replicaCount": 2,
        "podSecurityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    }


@dataclass(frozen=True)
class LeaderWorkerSetControllerArgs:
    chart_version: str
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the chart's images with a digest there are
    # pulled by it (platform.helm_release); the others run by their chart's tag.
    image_digests: dict[str, str] = field(default_factory=dict)


class LeaderWorkerSetController(pulumi.ComponentResource):
    """The LeaderWorkerSet CRD and controller."""

    def __init__(self, name: str, args: LeaderWorkerSetControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:serving:LeaderWorkerSetController", name, None, opts)
        ns = namespace(f"{name}-namespace", LWS_NAMESPACE, parent=self, pod_security=LWS_POD_SECURITY)
        # Helm installs the chart's crds/ on the first install only; a version bump must apply the new
        # CRDs first (the chart's README: `kubectl apply --server-side -f lws/crds`; docs/operations.md).
        self.release = helm_release(
            f"{name}-release",
            chart="lws",
            version=args.chart_version,
            release_namespace=ns.metadata.name,
            values=lws_values(),
            parent=self,
            image_digests=args.image_digests,
        )
        self.register_outputs({})
