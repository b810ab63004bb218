"""What a stack says about metrics and alerts: the Prometheus Operator stack (installed or existing), the GPU
health alert thresholds and where the runbooks are."""

from enum import StrEnum

from pydantic import Field

from llm_serving.platform import versions
from llm_serving.platform.args import (
    CHART_VERSION,
    DNS_LABEL,
    HTTPS_URL,
    LABEL_KEY,
    LABEL_VALUE,
    args_type,
    check_labels,
)


class PrometheusMode(StrEnum):
    """Install a Prometheus Operator stack, or use one the cluster already runs."""

    INSTALL = "install"
    EXISTING = "existing"


@args_type
class PrometheusArgs:
    """The Prometheus Operator that scrapes the GPU and serving metrics."""

    mode: PrometheusMode = PrometheusMode.EXISTING
    """`install` a kube-prometheus-stack, or use an `existing` Prometheus Operator."""
    namespace: str = Field(default="monitoring", **DNS_LABEL)
    """Namespace of Prometheus (installed or existing)."""
    chart_version: str = Field(default=versions.KUBE_PROMETHEUS_STACK.version, **CHART_VERSION)
    """kube-prometheus-stack chart version when `mode` is `install`."""
    url: str | None = Field(default=None, **HTTPS_URL)
    """Prometheus query URL; required with `existing`, derived with `install`."""
    monitor_selector_labels: dict[str, str] = Field(default_factory=dict)
    """Labels every ServiceMonitor, PodMonitor and PrometheusRule must carry for the existing Prometheus to select it
    (its `serviceMonitorSelector` / `ruleSelector`)."""
    _check_monitor_selector_labels = check_labels("monitor_selector_labels", LABEL_KEY, LABEL_VALUE)


@args_type
class GpuAlertsArgs:
    """Thresholds of the GPU health alerts."""

    temperature_celsius: int = Field(default=85, ge=60, le=100)
    """GPU temperature that raises an alert after 5 minutes."""
    throttle_minutes: int = Field(default=10, ge=1, le=120)
    """Minutes of thermal or power throttling before alerting."""
    exporter_absent_minutes: int = Field(default=5, ge=1, le=60)
    """Minutes a GPU node's exporter may be silent before alerting."""


@args_type
class ObservabilityArgs:
    """Metrics, alerts and runbooks."""

    prometheus: PrometheusArgs = Field(default_factory=PrometheusArgs)
    """Prometheus wiring."""
    runbook_base_url: str = Field(**HTTPS_URL)
    """Base URL of the runbooks; each alert links to `<base>#<alert-name>`."""
    gpu_alerts: GpuAlertsArgs = Field(default_factory=GpuAlertsArgs)
    """GPU health alert thresholds."""

