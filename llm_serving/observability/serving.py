"""ServingObservability: scraping, serving alerts and Grafana dashboards for the vLLM models.

A PodMonitor scrapes every vLLM pod's /metrics; a PrometheusRule holds the SLO and health alerts;
two dashboards (serving, GPU health) are ConfigMaps the Grafana sidecar picks up.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from llm_serving.platform import manifest_resource

from . import dashboards, scraping, serving_alerts
from .serving_alerts import ModelSlo


@dataclass(frozen=True)
class ServingObservabilityArgs:
    serving_namespace: str
    prometheus_namespace: str
    pod_selector: dict[str, str]
    port_name: str
    monitor_labels: dict[str, str]
    runbook_base_url: str
    models: tuple[ModelSlo, ...]
    gpu_metric_names: frozenset[str]  # DCGM fields the exporter exports; the GPU dashboard uses only these
    # `model_name` on vLLM's series from the pod's workload name (scraping.pod_monitor): a model runs two revisions.
    model_name_from_workload: bool = False


class ServingObservability(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        args: ServingObservabilityArgs,
        opts: pulumi.ResourceOptions | None = None,
        crds_from: list[pulumi.Resource] | None = None,
    ):
        super().__init__("llmserving:observability:ServingObservability", name, None, opts)
        # The Prometheus Operator CRDs must exist before these objects.
        after = pulumi.ResourceOptions(parent=self, depends_on=crds_from or [])
        manifest_resource(
            f"{name}-pod-monitor",
            scraping.pod_monitor(
                name="vllm",
                namespace=args.serving_namespace,
                selector=args.pod_selector,
                port_name=args.port_name,
                labels=args.monitor_labels,
                model_name_from_workload=args.model_name_from_workload,
            ),
            after,
        )
        groups = serving_alerts.serving_rule_groups(list(args.models), runbook_base_url=args.runbook_base_url)
        metadata = {"name": "vllm-serving", "namespace": args.serving_namespace, "labels": args.monitor_labels}
        rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": metadata}
        manifest_resource(f"{name}-rules", {**rule, "spec": {"groups": groups}}, after)
        child = pulumi.ResourceOptions(parent=self)
        boards = (("serving", dashboards.serving_dashboard()), ("gpu", dashboards.gpu_dashboard(args.gpu_metric_names)))
        for key, dashboard in boards:
            manifest_resource(
                f"{name}-dashboard-{key}",
                dashboards.dashboard_configmap(
                    name=f"llm-serving-{key}-dashboard", namespace=args.prometheus_namespace, dashboard=dashboard
                ),
                child,
            )
        self.register_outputs({})
