"""DcgmExporter: NVIDIA's DCGM exporter chart on every GPU node, scraped by Prometheus, with alerts.

Exports our counters file (Xid, ECC, row remapping, throttling, temperature, power, memory,
utilisation), a ServiceMonitor that names each sample's node, and the GPU health PrometheusRule.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from llm_serving.platform import NODE_LABEL, PodSecurity, helm_release, namespace, versions

from . import alerts, counters, scheduling

RELEASE_NAME = "dcgm-exporter"
# The chart names its Service after the release when the release name contains the chart name
# (chart _helpers.tpl "dcgm-exporter.fullname") and labels it with these selector labels.
SERVICE_SELECTOR = {
    "app.kubernetes.io/name": "dcgm-exporter",
    "app.kubernetes.io/instance": RELEASE_NAME,
}
METRICS_PORT_NAME = "metrics"  # chart templates/service.yaml
COUNTERS_DIR = "/etc/dcgm-exporter"
# dcgm-exporter 4.8.2's chart runs the exporter as root with SYS_ADMIN added (values.yaml
# securityContext, needed for the DCGM_FI_PROF_* profiling fields), which only `privileged` admits.
DCGM_POD_SECURITY = PodSecurity("privileged", "dcgm-exporter runs as root with SYS_ADMIN for profiling metrics")

def counters_configmap_name() -> str:
    """Named after its content: a subPath mount never sees ConfigMap updates, so a changed
    counters file must be a new ConfigMap, which also changes the pod template and rolls the
    DaemonSet."""
    digest = hashlib.sha256(counters.counters_csv().encode()).hexdigest()[:10]
    return f"llm-serving-dcgm-counters-{digest}"


@dataclass(frozen=True)
class DcgmExporterArgs:
    namespace: str
    chart_version: str
    runbook_base_url: str
    temperature_celsius: int
    throttle_minutes: int
    exporter_absent_minutes: int
    monitor_labels: dict[str, str] = field(default_factory=dict)
    scrape_interval_seconds: int = 15
    auto_repair: bool = True  # the node group's EKS auto repair: the alerts say what it fixes
    # Existing GPU nodes: their selector and tolerations; None: the created group's (scheduling.py).
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, str]] | None = None
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the chart's images with a digest there are
    # pulled by it (platform.helm_release); the others run by their chart's tag.
    image_digests: dict[str, str] = field(default_factory=dict)


def chart_values(node_selector: dict[str, str] | None = None,
                 tolerations: list[dict[str, str]] | None = None) -> dict[str, object]:
    """Helm values: our counters file instead of the default one, GPU nodes only, and no chart
    ServiceMonitor (ours below relabels the node name and is validated against the CRD)."""
    counters_path = f"{COUNTERS_DIR}/{counters.COUNTERS_FILE_NAME}"
    return {
        "image": {"tag": versions.DCGM_EXPORTER_IMAGE_TAG},
        "arguments": ["-f", counters_path],
        # Lists replace in Helm, so these two replace the chart's default counters mount.
        "extraConfigMapVolumes": [
            {
                "name": "llm-serving-counters",
                "configMap": {
                    "name": counters_configmap_name(),
                    "items": [{"key": "counters.csv", "path": counters.COUNTERS_FILE_NAME}],
                },
            }
        ],
        "extraVolumeMounts": [
            {
                "name": "llm-serving-counters",
                "mountPath": counters_path,
                "subPath": counters.COUNTERS_FILE_NAME,
            }
        ],
        # The chart enables its ServiceMonitor by default, which fails the install on a cluster
        # without the CRD (NVIDIA/dcgm-exporter deployment/values.yaml @ 4.5.3-4.8.2); ours is created
        # after the CRD's owner instead.
        "serviceMonitor": {"enabled": False},
        # The chart tolerates only the control-plane taint and has no node selector: by default it
        # lands on CPU nodes and never on tainted GPU nodes (chart values.yaml).
        "nodeSelector": node_selector if node_selector is not None else scheduling.addon_node_selector(),
        "tolerations": tolerations if tolerations is not None else scheduling.gpu_tolerations(),
    }


class DcgmExporter(pulumi.ComponentResource):
    """DCGM exporter DaemonSet, its ServiceMonitor and the GPU health alert rules."""

    namespace: pulumi.Output[str]
    job_label: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        args: DcgmExporterArgs,
        opts: pulumi.ResourceOptions | None = None,
        crds_from: list[pulumi.Resource] | None = None,
    ):
        super().__init__("llmserving:gpu:DcgmExporter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns = namespace(f"{name}-namespace", args.namespace, parent=self, pod_security=DCGM_POD_SECURITY)
        counters_file = k8s.core.v1.ConfigMap(
            f"{name}-counters",
            metadata={"name": counters_configmap_name(), "namespace": ns.metadata.name},
            data={"counters.csv": counters.counters_csv()},
            opts=child,
        )
        release = helm_release(
            f"{name}-release",
            chart="dcgm-exporter",
            version=args.chart_version,
            release_namespace=ns.metadata.name,
            values=chart_values(args.node_selector, args.tolerations),
            parent=self,
            image_digests=args.image_digests,
            depends_on=[counters_file],
        )
        # The CRDs come from the Prometheus Operator stack; without it first, the API server
        # rejects these objects with "no matches for kind ServiceMonitor".
        after_crds = pulumi.ResourceOptions(parent=self, depends_on=[release, *(crds_from or [])])
        k8s.apiextensions.CustomResource(
            f"{name}-service-monitor",
            api_version="monitoring.coreos.com/v1",
            kind="ServiceMonitor",
            metadata={"name": RELEASE_NAME, "namespace": ns.metadata.name, "labels": args.monitor_labels},
            spec={
                "jobLabel": "app.kubernetes.io/name",
                "selector": {"matchLabels": SERVICE_SELECTOR},
                "namespaceSelector": {"matchNames": [args.namespace]},
                "endpoints": [
                    {
                        "port": METRICS_PORT_NAME,
                        "path": "/metrics",
                        "interval": f"{args.scrape_interval_seconds}s",
                        # Alerts name the node through this label, which `up` carries too; the
                        # exporter's own Hostname label is absent from `up` and renamed upstream
                        # after 4.8.2 (dcgm-exporter#655).
                        "relabelings": [
                            {
                                "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                "targetLabel": NODE_LABEL,
                                "action": "replace",
                            }
                        ],
                    }
                ],
            },
            opts=after_crds,
        )
        k8s.apiextensions.CustomResource(
            f"{name}-gpu-health-rules",
            api_version="monitoring.coreos.com/v1",
            kind="PrometheusRule",
            metadata={"name": "gpu-health", "namespace": ns.metadata.name, "labels": args.monitor_labels},
            spec={
                "groups": alerts.gpu_health_rule_groups(
                    runbook_base_url=args.runbook_base_url,
                    auto_repair=args.auto_repair,
                    job_label=RELEASE_NAME,
                    throttle_for_minutes=args.throttle_minutes,
                    temperature_celsius=args.temperature_celsius,
                    exporter_absent_minutes=args.exporter_absent_minutes,
                )
            },
            opts=after_crds,
        )
        self.namespace = ns.metadata.name
        self.job_label = pulumi.Output.from_input(RELEASE_NAME)
        self.register_outputs({"namespace": self.namespace, "job_label": self.job_label})
