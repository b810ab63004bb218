"""The edge as users see it: a PodMonitor for Envoy's proxies and burn-rate alerts on their answers (pure).

Envoy is where a user's request succeeds or fails: a 500 from a picker that fails closed, a 503 with
no healthy replica, a stream Envoy resets mid-answer all happen there, and vLLM never sees most of
them. Metric names: Envoy's HTTP connection manager statistics (envoyproxy.io docs,
configuration/http/http_conn_man/stats: downstream_rq_total, downstream_rq_xx, downstream_rq_tx_reset)
as Envoy's /stats/prometheus names them (prefix envoy_http_, the response code class as the
`envoy_response_code_class` tag). Envoy Gateway serves them on the proxy container's port `metrics`
(19001, /stats/prometheus) and labels every proxy pod app.kubernetes.io/name=envoy and
gateway.envoyproxy.io/owning-gateway-name (internal/infrastructure/kubernetes/proxy/resource.go @v1.9.0).
"""

from __future__ import annotations

from typing import Any

from llm_serving.platform import BURN_FOR_MINUTES, BURN_RATES, ENVOY_GATEWAY_LISTENERS, alert_rule

MONITORING_API = "monitoring.coreos.com/v1"
ENVOY_METRICS_PORT = "metrics"
ENVOY_METRICS_PATH = "/stats/prometheus"
# Type of every Envoy series the rules read; tests check each expression against this list.
ENVOY_METRIC_TYPES: dict[str, str] = {
    "envoy_http_downstream_rq_total": "counter",
    "envoy_http_downstream_rq_xx": "counter",
    "envoy_http_downstream_rq_tx_reset": "counter",
}
# byModel routing: the kube-state-metrics series the router's alert reads (kubernetes/kube-state-metrics
# docs/metrics/workload/pod-metrics.md, `kube_pod_init_container_status_ready`: "Describes whether the init
# containers readiness check succeeded"; AI Gateway injects its sidecar as a native sidecar, an init container with
# restartPolicy Always, envoyproxy/ai-gateway v1.1.0 internal/controller/extproc_builder.go).
ROUTER_METRIC_TYPES: dict[str, str] = {"kube_pod_init_container_status_ready": "gauge"}
# The sidecar's container name (internal/controller/gateway_mutator.go @v1.1.0: "ai-gateway-" + "extproc").
ROUTER_CONTAINER = "ai-gateway-extproc"
# Its readiness probe fails after one missed check every 10 s (extproc_builder.go); five minutes is no blip.
ROUTER_NOT_READY_MINUTES = 5
# The availability objective of every model behind the edge: 99.5 % of requests answered without a 5xx
# or a reset over 30 days (a 0.5 % error budget, 3.6 hours a month). Burn rates: platform.BURN_RATES.
AVAILABILITY_OBJECTIVE = 0.995


def envoy_selector(gateway_name: str, edge_namespace: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "envoy", "gateway.envoyproxy.io/owning-gateway-name": gateway_name,
            "gateway.envoyproxy.io/owning-gateway-namespace": edge_namespace}


def envoy_pod_monitor(gateway_name: str, edge_namespace: str, monitor_labels: dict[str, str]) -> dict[str, Any]:
    """Scrape every proxy of the Gateway; the job label is `<namespace>/<name>` (prometheus-operator)."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": {"name": f"{gateway_name}-envoy", "namespace": edge_namespace,
                     "labels": {"app.kubernetes.io/part-of": "llm-serving", **monitor_labels}},
        "spec": {
            "selector": {"matchLabels": envoy_selector(gateway_name, edge_namespace)},
            "podMetricsEndpoints": [{"port": ENVOY_METRICS_PORT, "path": ENVOY_METRICS_PATH, "interval": "15s"}],
        },
    }


def error_ratio(job: str, window: str) -> str:
    """Requests answered 5xx or reset by Envoy, over every request, across the Gateway's proxies."""
    selector = f'job="{job}", {ENVOY_GATEWAY_LISTENERS}'
    errors = (f'sum(rate(envoy_http_downstream_rq_xx{{{selector}, envoy_response_code_class="5"}}[{window}])) + '
              f"sum(rate(envoy_http_downstream_rq_tx_reset{{{selector}}}[{window}]))")
    return f"({errors}) / sum(rate(envoy_http_downstream_rq_total{{{selector}}}[{window}]))"


def router_alert_rule(edge_namespace: str, runbook_base_url: str) -> dict[str, Any]:
    """byModel routing: an Envoy pod whose body router (AI Gateway's ext_proc sidecar) is not ready. Envoy calls it
    with failure_mode_allow false (internal/extensionserver/post_translate_modify.go @v1.1.0), so every request that
    pod takes fails, 500 (or 504 after the sidecar's 10 s message timeout); its readiness takes the pod out of the
    NLB's targets as well (a native sidecar's readiness counts towards the pod's Ready condition). A pod created
    without the sidecar (the webhook skipped) fails every request and shows as EdgeErrorBudgetBurnFast."""
    return alert_rule(
        alert="EdgeModelRouterNotReady",
        expr=(f'kube_pod_init_container_status_ready{{namespace="{edge_namespace}", '
              f'container="{ROUTER_CONTAINER}"}} == 0'),
        for_minutes=ROUTER_NOT_READY_MINUTES,
        severity="critical",
        summary="The body router of Envoy pod {{ $labels.pod }} has not been ready for "
                f"{ROUTER_NOT_READY_MINUTES} minutes",
        description=("AI Gateway's ext_proc sidecar reads each request's model and picks its pool; Envoy fails "
                     "closed without it (500, or 504 after 10 s), and the pod leaves the load balancer. Check the "
                     f"{ROUTER_CONTAINER} container's logs and restarts, and the AI Gateway controller."),
        runbook_base_url=runbook_base_url,
        labels={"namespace": edge_namespace},
    )


def edge_alert_groups(gateway_name: str, edge_namespace: str, runbook_base_url: str,
                      objective: float = AVAILABILITY_OBJECTIVE, by_model: bool = False) -> list[dict[str, Any]]:
    job = f"{edge_namespace}/{gateway_name}-envoy"
    budget = 1 - objective
    rules = []
    for burn in BURN_RATES:
        long, short, rate = burn.long_window, burn.short_window, burn.rate
        threshold = round(rate * budget, 6)
        rules.append(alert_rule(
            alert=f"EdgeErrorBudgetBurn{burn.name}",
            expr=f"{error_ratio(job, long)} > {threshold} and {error_ratio(job, short)} > {threshold}",
            for_minutes=BURN_FOR_MINUTES,
            severity=burn.severity,
            summary=(f"The edge answers more than {threshold:.2%} of requests with a 5xx or a reset over {long} and "
                     f"{short}: the {objective:.1%} availability budget burns {rate:g}x too fast"),
            description=("Users see failed or cut requests. 5xx from a picker that fails closed, no ready replica, "
                         "or a drain shorter than a stream; resets from an upstream that went away mid-answer."),
            runbook_base_url=runbook_base_url,
            labels={"namespace": edge_namespace, "gateway": gateway_name},
        ))
    if by_model:
        rules.append(router_alert_rule(edge_namespace, runbook_base_url))
    return [{"name": f"llm-serving-edge-{gateway_name}", "rules": rules}]
