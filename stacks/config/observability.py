"""Configuration of metrics, alerts and runbooks: the Prometheus stack (installed or existing)
and the GPU health alert thresholds. Feeds components/observability.
Shapes and ranges only; relations are checked in stacks/checks/.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from components.platform import versions
from stacks.config.base import ChartVersion, ConfigModel, DnsLabel, HttpsUrl, LabelKey, LabelValue


class PrometheusMode(StrEnum):
    """Install a Prometheus Operator stack, or use one the cluster already runs."""

    INSTALL = "install"
    EXISTING = "existing"


class PrometheusConfig(ConfigModel):
    """The Prometheus Operator that scrapes the GPU and serving metrics."""

    mode: PrometheusMode = Field(
        default=PrometheusMode.EXISTING,
        description="`install` a kube-prometheus-stack, or use an `existing` Prometheus Operator.",
    )
    namespace: DnsLabel = Field(
        default="monitoring", description="Namespace of Prometheus (installed or existing)."
    )
    chart_version: ChartVersion = Field(
        default=versions.KUBE_PROMETHEUS_STACK.version,
        description="kube-prometheus-stack chart version when `mode` is `install`.",
    )
    url: HttpsUrl | None = Field(
        default=None,
        description="Prometheus query URL; required with `existing`, derived with `install`.",
    )
    monitor_selector_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description=(
            "Labels every ServiceMonitor, PodMonitor and PrometheusRule must carry for the existing "
            "Prometheus to select it (its `serviceMonitorSelector` / `ruleSelector`)."
        ),
    )


class GpuAlertsConfig(ConfigModel):
    """Thresholds of the GPU health alerts."""

    temperature_celsius: int = Field(
        default=85, ge=60, le=100, description="GPU temperature that raises an alert after 5 minutes."
    )
    throttle_minutes: int = Field(
        default=10, ge=1, le=120, description="Minutes of thermal or power throttling before alerting."
    )
    exporter_absent_minutes: int = Field(
        default=5, ge=1, le=60, description="Minutes a GPU node's exporter may be silent before alerting."
    )


class ObservabilityConfig(ConfigModel):
    """Metrics, alerts and runbooks."""

    prometheus: PrometheusConfig = Field(
        default_factory=PrometheusConfig, description="Prometheus wiring."
    )
    runbook_base_url: HttpsUrl = Field(
        description="Base URL of the runbooks; each alert links to `<base>#<alert-name>`."
    )
    gpu_alerts: GpuAlertsConfig = Field(
        default_factory=GpuAlertsConfig, description="GPU health alert thresholds."
    )
