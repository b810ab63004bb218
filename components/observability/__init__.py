"""Observability of the models: kube-prometheus-stack where the cluster has none, the PodMonitor
that scrapes vLLM, the serving alerts and the Grafana dashboards."""

from .prometheus_stack import PrometheusStack, PrometheusStackArgs, query_url
from .serving import ServingObservability, ServingObservabilityArgs
from .serving_alerts import ModelSlo

__all__ = [
    "ModelSlo",
    "PrometheusStack",
    "PrometheusStackArgs",
    "ServingObservability",
    "ServingObservabilityArgs",
    "query_url",
]
