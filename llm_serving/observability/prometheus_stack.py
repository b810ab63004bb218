"""PrometheusStack: kube-prometheus-stack for clusters that have no Prometheus Operator yet.

Brings the Prometheus Operator CRDs (ServiceMonitor, PodMonitor, PrometheusRule) that the GPU and
serving layers declare objects of, plus Prometheus, Alertmanager and Grafana.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from llm_serving.platform import PodSecurity, crd_chart, helm_release, namespace, versions

RELEASE_NAME = "kube-prometheus-stack"
# kube-prometheus-stack's node-exporter DaemonSet reads the host: hostNetwork, hostPID and a hostPath
# of the root filesystem, which only `privileged` admits.
MONITORING_POD_SECURITY = PodSecurity("privileged", "node-exporter uses hostNetwork, hostPID and hostPath /")


GRAFANA_ADMIN_SECRET = "grafana-admin"


@dataclass(frozen=True)
class PrometheusStackArgs:
    namespace: str
    chart_version: str
    grafana_admin_password: pulumi.Input[str]
    retention_days: int = 15
    protect_crds: bool = False  # the Prometheus Operator's CRDs: retained always, protected when asked
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the chart's images with a digest there are
    # pulled by it (platform.helm_release); the others run by their chart's tag.
    image_digests: dict[str, str] = field(default_factory=dict)


def chart_values(retention_days: int) -> dict[str, object]:
    # By default the chart's Prometheus only selects monitors and rules labelled with its own
    # release (`*SelectorNilUsesHelmValues: true`, chart values.yaml); ours live in other
    # namespaces without that label and would be silently ignored.
    selectors = {
        "serviceMonitorSelectorNilUsesHelmValues": False,
        "podMonitorSelectorNilUsesHelmValues": False,
        "ruleSelectorNilUsesHelmValues": False,
    }
    return {
        "prometheus": {"prometheusSpec": {**selectors, "retention": f"{retention_days}d"}},
        # Grafana's admin password comes from our Secret, never from the chart's public default
        # or from Helm values (which would store it in the release).
        "grafana": {"admin": {"existingSecret": GRAFANA_ADMIN_SECRET}},
        # The operator's CRDs come from prometheus-operator-crds (below), which a bump upgrades;
        # the chart's own copy sits in crds/, which Helm never upgrades.
        "crds": {"enabled": False},
    }


def query_url(prometheus_namespace: str) -> str:
    """In-cluster query URL of the Prometheus the chart creates (operator's governing Service)."""
    return f"http://prometheus-operated.{prometheus_namespace}.svc:9090"


class PrometheusStack(pulumi.ComponentResource):
    """The kube-prometheus-stack release; other components depend on it for the CRDs."""

    namespace: pulumi.Output[str]
    url: pulumi.Output[str]

    def __init__(self, name: str, args: PrometheusStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:observability:PrometheusStack", name, None, opts)
        ns = namespace(f"{name}-namespace", args.namespace, parent=self, pod_security=MONITORING_POD_SECURITY)
        admin = k8s.core.v1.Secret(
            f"{name}-grafana-admin",
            metadata={"name": GRAFANA_ADMIN_SECRET, "namespace": ns.metadata.name},
            type="Opaque",
            string_data={
                "admin-user": "admin",
                "admin-password": pulumi.Output.secret(args.grafana_admin_password),
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        crds = crd_chart(
            f"{name}-crds",
            chart="prometheus-operator-crds",
            version=versions.PROMETHEUS_OPERATOR_CRDS.version,
            values={},
            parent=self,
            protect=args.protect_crds,
        )
        self.release = helm_release(
            f"{name}-release",
            chart=RELEASE_NAME,
            version=args.chart_version,
            release_namespace=ns.metadata.name,
            values=chart_values(args.retention_days),
            parent=self,
            depends_on=[admin, crds],
            image_digests=args.image_digests,
        )
        self.namespace = ns.metadata.name
        self.url = pulumi.Output.from_input(query_url(args.namespace))
        self.register_outputs({"namespace": self.namespace, "url": self.url})
