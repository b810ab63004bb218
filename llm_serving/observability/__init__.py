"""Observability of the models: kube-prometheus-stack where the cluster has none, the PodMonitor
that scrapes vLLM, the serving alerts and the Grafana dashboards."""

from .args import (
    GpuAlertsArgs,
    ObservabilityArgs,
    PrometheusArgs,
    PrometheusMode,
)
from .prometheus_stack import PrometheusStack, PrometheusStackArgs, query_url
from .serving import ServingObservability, ServingObservabilityArgs
from .serving_alerts import ModelSlo

__all__ = [
    "GpuAlertsArgs",
    "ModelSlo",
    "ObservabilityArgs",
    "PrometheusArgs",
    "PrometheusMode",
    "PrometheusStack",
    "PrometheusStackArgs",
    "ServingObservability",
    "ServingObservabilityArgs",
    "query_url",
]
