"""The edge's monitoring as rendered: a PodMonitor valid against the vendored CRD that selects exactly the
proxies Envoy Gateway labels, and burn-rate rules over Envoy's own statistics."""

from __future__ import annotations

import pytest

from llm_serving.edge import ENVOY_METRIC_TYPES
from llm_serving.edge.alerts import error_ratio
from tests.support import promql, reference
from tests.support.promql_eval import Store, evaluate


def test_prod_scrapes_the_gateways_envoy_proxies_on_their_metrics_port(rendered):
    monitor = rendered["prod"].manifest("PodMonitor", "llm-serving-envoy")
    assert reference.custom_resource_errors(monitor) == []
    assert monitor["metadata"]["namespace"] == "envoy-gateway-system"
    # The existing Prometheus selects monitors by this label (observability.prometheus.monitorSelectorLabels).
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"] == {
        # Envoy Gateway v1.9.0 labels every proxy pod with these (proxy/resource.go envoyLabels and the
        # owning-gateway labels) and names the stats port `metrics` (19001, /stats/prometheus).
        "selector": {"matchLabels": {"app.kubernetes.io/name": "envoy",
                                     "gateway.envoyproxy.io/owning-gateway-name": "llm-serving",
                                     "gateway.envoyproxy.io/owning-gateway-namespace": "envoy-gateway-system"}},
        "podMetricsEndpoints": [{"port": "metrics", "path": "/stats/prometheus", "interval": "15s"}],
    }


def test_burn_rate_rules_read_only_envoys_counters_over_two_windows_each(rendered):
    rule = rendered["prod"].manifest("PrometheusRule", "edge-alerts")
    assert reference.custom_resource_errors(rule) == []
    (group,) = rule["spec"]["groups"]
    fast, slow = group["rules"]
    assert (fast["alert"], fast["labels"]["severity"], fast["for"]) == ("EdgeErrorBudgetBurnFast", "critical", "2m")
    assert (slow["alert"], slow["labels"]["severity"]) == ("EdgeErrorBudgetBurnSlow", "warning")
    job = 'job="envoy-gateway-system/llm-serving-envoy"'
    assert fast["expr"].count("[1h]") == 3 and fast["expr"].count("[5m]") == 3 and fast["expr"].endswith("> 0.072")
    assert slow["expr"].count("[6h]") == 3 and slow["expr"].count("[30m]") == 3 and slow["expr"].endswith("> 0.03")
    for r in (fast, slow):
        assert promql.parse_errors(r["expr"]) == []
        assert promql.metric_names(r["expr"]) == set(ENVOY_METRIC_TYPES)
        assert promql.counter_function_errors(r["expr"], ENVOY_METRIC_TYPES) == []
        assert job in r["expr"]



def test_the_error_ratio_counts_only_gateway_listeners_not_probes_or_scrapes():
    # One user request a second, a tenth of them 503s, on the Gateway's https-443 listener; the kubelet's
    # readiness probes and Prometheus' scrapes answer 200 on Envoy Gateway's own listeners.
    store = Store()
    job = "envoy-gateway-system/llm-serving-envoy"
    for prefix, total, errors in (("https-443", 300, 30), ("eg-ready-http", 100, 0), ("eg-stats-http", 20, 0)):
        labels = {"job": job, "envoy_http_conn_manager_prefix": prefix}
        store.add("envoy_http_downstream_rq_total", labels, [(10, 0), (300, total)])
        store.add("envoy_http_downstream_rq_xx", {**labels, "envoy_response_code_class": "5"}, [(10, 0), (300, errors)])
        store.add("envoy_http_downstream_rq_tx_reset", labels, [(10, 0), (300, 0)])
    assert evaluate(error_ratio(job, "5m"), store, 300) == {(): pytest.approx(0.1)}


def test_by_model_alerts_on_an_envoy_pod_whose_body_router_is_not_ready():
    from llm_serving.edge.alerts import ROUTER_METRIC_TYPES, edge_alert_groups

    (per_model,) = edge_alert_groups("llm-serving", "envoy-gateway-system", "https://x")
    (by_model,) = edge_alert_groups("llm-serving", "envoy-gateway-system", "https://x", by_model=True)
    assert [r["alert"] for r in by_model["rules"]] == [*(r["alert"] for r in per_model["rules"]),
                                                      "EdgeModelRouterNotReady"]
    rule = by_model["rules"][-1]
    assert promql.parse_errors(rule["expr"]) == []
    assert promql.metric_names(rule["expr"]) == set(ROUTER_METRIC_TYPES)
    # One pod's sidecar unready fires for that pod only; a ready one, or a container of another name, does not.
    store = Store()
    for pod, container, ready in (("envoy-a", "ai-gateway-extproc", 0), ("envoy-b", "ai-gateway-extproc", 1),
                                  ("envoy-c", "envoy", 0)):
        store.add("kube_pod_init_container_status_ready",
                  {"namespace": "envoy-gateway-system", "pod": pod, "container": container}, [(300, ready)])
    fired = evaluate(rule["expr"], store, 300)
    assert [dict(labels)["pod"] for labels in fired] == ["envoy-a"]
