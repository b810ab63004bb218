"""What every Prometheus rule, query and dashboard of this project shares (pure, no Pulumi import).

The target labels our scrape configs set (namespace, pod, node), the checks for values embedded in
PromQL, and one alerting-rule shape: severity, summary, description and a runbook link per alert.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Target labels on every series we scrape. `namespace` and `pod` are set by the Prometheus Operator
# on PodMonitor targets (and relabelled explicitly by ours). `node` is relabelled by our scrape
# configs from __meta_kubernetes_pod_node_name, so it lands on every scraped series AND on `up`. We
# do not use dcgm-exporter's own host label: it is `Hostname` in 4.5.3-4.8.2 but renamed `hostname`
# on upstream main right after that release (dcgm-exporter #655, 2026-05-12), it is dropped by the
# exporter's `-n` flag, and `up` never has it, so an exporter-down alert could not name the node.
# Nor do we join kube_node_labels: the rules must work without kube-state-metrics. The exporter emits
# no `node` label itself (render_metrics.go), so the chart's honorLabels: false causes no clash.
NAMESPACE_LABEL = "namespace"
POD_LABEL = "pod"
NODE_LABEL = "node"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A value embedded in a PromQL string literal or an alert template: no quote, backslash, newline or
# Go-template braces.
_UNSAFE_IN_LITERAL = ('"', "\\", "\n", "\r", "{{", "}}")


def check_dns_label(field: str, value: str) -> None:
    """Raise unless `value` is a Kubernetes DNS-1123 label (names of namespaces and Deployments here)."""
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{field}={value!r}: expected a DNS-1123 label (lowercase alphanumerics and '-', <= 63)")


def check_label_value(field: str, value: str) -> None:
    """Raise unless `value` can sit inside a PromQL string literal and an alert template unescaped."""
    if not isinstance(value, str) or not value or any(bad in value for bad in _UNSAFE_IN_LITERAL):
        raise ValueError(f"{field}={value!r}: expected a non-empty value without quotes, backslashes or braces")


def alert_rule(
    *,
    alert: str,
    expr: str,
    for_minutes: int,
    severity: str,
    summary: str,
    description: str,
    runbook_base_url: str,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PrometheusRule `rules[]` entry; `labels` add to the severity label."""
    return {
        "alert": alert,
        "expr": expr,
        "for": f"{for_minutes}m",
        "labels": {"severity": severity, **(labels or {})},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{runbook_base_url}#{alert.lower()}",
        },
    }


@dataclass(frozen=True)
class BurnRate:
    """One multi-window burn-rate alert: the share of a 30-day error budget it pages on, read over a long
    window and confirmed over a short one (1/12 of the long), so it starts only on a sustained burn and
    stops within minutes of the burn stopping."""

    name: str  # the alert name's suffix: "Fast" or "Slow"
    long_window: str
    short_window: str
    rate: float  # times the rate that spends exactly the budget in 30 days
    severity: str


# Google SRE workbook, "Alerting on SLOs", table 5-8: 2 % of a 30-day budget in 1 hour pages (14.4x),
# 5 % in 6 hours warns (6x). Every SLO alert of the stack (the edge's availability, each model's time to
# first token at the edge) uses these two.
BURN_RATES: tuple[BurnRate, ...] = (
    BurnRate("Fast", "1h", "5m", 14.4, "critical"),
    BurnRate("Slow", "6h", "30m", 6.0, "warning"),
)
# Both windows must hold this long: one scrape with a burst of errors never pages.
BURN_FOR_MINUTES = 2

# Envoy Gateway's proxies count their own listeners' requests too: Prometheus' scrapes of the stats
# listener (HTTP connection manager stat prefix `eg-stats-http`, internal/xds/bootstrap/bootstrap.yaml.tpl
# @v1.9.0) and the kubelet's readiness probes (`eg-ready-http`). Gateway listeners are `http-<port>` or
# `https-<port>` (internal/xds/translator/listener.go hcmStatPrefix @v1.9.0); only they carry users'
# requests, so every edge ratio selects them and the probes cannot dilute a quiet hour's errors.
ENVOY_GATEWAY_LISTENERS = 'envoy_http_conn_manager_prefix=~"https?-[0-9]+"'
