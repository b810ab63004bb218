"""Endpoint-picker alerts and each routed model's time to first token at the edge (PrometheusRule
spec.groups), pure: two groups per routed model.

The gateway fails closed when a model's picker is unreachable (llm_serving/routing/objects.py), so
"no picker up" is as urgent as "no replica up". Metric names: objects.PICKER_METRICS (llm-d-router
v0.10.0) and Prometheus's own `up`; the PodMonitor's job label is `<namespace>/<podmonitor name>`
(prometheus-operator's default for PodMonitors).

Time to first token at the edge comes from the picker, the only component on the edge's path that sees
a stream's first byte: Envoy's own histograms end at the last byte (cluster `upstream_rq_time`, HTTP
connection manager `downstream_rq_time`: envoyproxy.io docs, cluster_stats and http_conn_man/stats), and
Envoy AI Gateway v1.1.0's `gen_ai.server.time_to_first_token` is recorded by its extproc sidecar, which
it injects only into the proxies of a Gateway with an AIGatewayRoute or MCPRoute
(internal/controller/gateway_mutator.go mutatePod @v1.1.0); this program routes with plain HTTPRoutes unless
`edge.routing` is byModel, and reads the picker's figure in every mode.
"""

from __future__ import annotations

import math
from typing import Any

from llm_serving.platform import BURN_FOR_MINUTES, BURN_RATES, alert_rule

from .metrics import PICKER_TTFT_BUCKETS
from .objects import RoutedModel, picker_name

# kube-state-metrics series (docs/metrics/policy/poddisruptionbudget-metrics.md and
# workload/pod-metrics.md, STABLE), with the object's own namespace label (honorLabels, as the
# serving alerts assume).
PICKER_KUBE_STATE_METRICS = frozenset({
    "kube_poddisruptionbudget_status_current_healthy",
    "kube_poddisruptionbudget_status_desired_healthy",
    "kube_pod_container_status_restarts_total",
})
# Below the PDB's floor for this long pages: a picker rollout surges first (maxUnavailable 0), so it
# never dips below; a node drain waits for the PDB. Only a crash or a stuck pod gets here.
BELOW_BUDGET_FOR_MINUTES = 2
RESTART_WINDOW = "15m"
# A picker adds its scheduling time before every first token; beyond this it is the bottleneck.
SCHEDULING_P99_SECONDS = 0.05
ERROR_RATIO = 0.05
# How the picker labels a refused request: the error's canonical code, or the status it answered
# (pkg/epp/handlers/server.go @v0.10.0 records one of the two); 429 is ResourceExhausted.
NOT_SHEDDING = 'error_code!~"ResourceExhausted|429"'
# Flow-control outcomes that answer 429: a full band, or a wait past the queue-wait budget.
SHED_OUTCOMES = "RejectedCapacity|EvictedTTL"
STALE_FOR_MINUTES = 5
SHED_RATE_MINUTES = 5
# slo.ttftP95Seconds reads as an SLO: 95 % of streamed requests get their first token within it, a 5 %
# budget of slow ones over 30 days, burnt at platform.BURN_RATES.
TTFT_OBJECTIVE_SHARE = 0.95


def ttft_boundary(objective_seconds: float) -> float:
    """The largest bucket boundary at or below the objective: a request counted as fast there is fast by
    the objective too (a boundary above it would count slow requests as fast)."""
    below = [b for b in PICKER_TTFT_BUCKETS if b <= objective_seconds]
    if not below:
        raise ValueError(f"ttft objective {objective_seconds:g} s is below the picker's smallest TTFT bucket "
                         f"({PICKER_TTFT_BUCKETS[0]:g} s)")
    return below[-1]


def _le(boundary: float) -> str:
    # client_golang writes le="2"; Prometheus 3 normalises classic-histogram `le` values to floats on
    # ingestion (le="2.0"; prometheus.io/docs/prometheus/latest/migration): match both spellings.
    text = f"{boundary:g}"
    return f'le=~"{text}(\\\\.0)?"' if float(boundary).is_integer() else f'le="{text}"'


def slow_ttft_ratio(job: str, boundary: float, window: str) -> str:
    """Streamed requests whose first token took longer than `boundary`, over all streamed requests."""
    selector = f'job="{job}", streaming="true"'
    total = f"sum(rate(llm_d_epp_request_ttft_seconds_count{{{selector}}}[{window}]))"
    fast = f"sum(rate(llm_d_epp_request_ttft_seconds_bucket{{{selector}, {_le(boundary)}}}[{window}]))"
    return f"({total} - {fast}) / {total}"


def ttft_alert_group(m: RoutedModel, runbook_base_url: str) -> dict[str, Any]:
    """Multi-window burn-rate alerts on the model's time to first token at the edge."""
    assert m.ttft_objective_seconds is not None
    job = f"{m.namespace}/{picker_name(m.name)}"
    boundary = ttft_boundary(m.ttft_objective_seconds)
    budget = round(1 - TTFT_OBJECTIVE_SHARE, 6)
    rules = []
    for burn in BURN_RATES:
        threshold = round(burn.rate * budget, 6)
        ratio = f"{slow_ttft_ratio(job, boundary, burn.long_window)} > {threshold} and " \
                f"{slow_ttft_ratio(job, boundary, burn.short_window)} > {threshold}"
        rules.append(alert_rule(
            alert=f"EdgeTtftBudgetBurn{burn.name}",
            expr=ratio,
            for_minutes=BURN_FOR_MINUTES,
            severity=burn.severity,
            summary=(f"More than {threshold:.0%} of {m.name}'s streamed requests waited over {boundary:g} s for "
                     f"their first token at the edge over {burn.long_window} and {burn.short_window}: the "
                     f"{TTFT_OBJECTIVE_SHARE:.0%} TTFT objective burns {burn.rate:g}x too fast"),
            description=("Users wait for the first token: requests queue in vLLM (replicas at their maximum, or a "
                         "scale-out still adding nodes), prefill is slow (long prompts, a throttled GPU), or the "
                         "picker is slow to place requests."),
            runbook_base_url=runbook_base_url,
            labels={"model": m.name, "namespace": m.namespace},
        ))
    return {"name": f"edge-ttft-{m.name}", "rules": rules}


def picker_alert_groups(models: tuple[RoutedModel, ...], replicas: int, runbook_base_url: str) -> list[dict[str, Any]]:
    groups = []
    for m in models:
        job = f'job="{m.namespace}/{picker_name(m.name)}"'
        labels = {"model": m.name, "namespace": m.namespace}
        picker_pods = f'namespace="{m.namespace}", pod=~"{picker_name(m.name)}-[a-z0-9]+-[a-z0-9]+"'
        pdb = f'namespace="{m.namespace}", poddisruptionbudget="{picker_name(m.name)}"'
        rules = [
            alert_rule(
                alert="EndpointPickerBelowDisruptionBudget",
                expr=(f"kube_poddisruptionbudget_status_current_healthy{{{pdb}}} < "
                      f"kube_poddisruptionbudget_status_desired_healthy{{{pdb}}}"),
                for_minutes=BELOW_BUDGET_FOR_MINUTES,
                severity="critical",
                summary=f"Fewer healthy endpoint pickers of {m.name} than its PodDisruptionBudget's floor",
                description=("The gateway fails closed and keeps choosing a crashed picker for seconds (least "
                             "request, no outlier detection in Envoy AI Gateway v1.1.0): most new requests to the "
                             "model get a 500 while this lasts."),
                runbook_base_url=runbook_base_url,
                labels=labels,
            ),
            alert_rule(
                alert="EndpointPickerRestarting",
                expr=f"sum(increase(kube_pod_container_status_restarts_total{{{picker_pods}}}[{RESTART_WINDOW}])) > 0",
                for_minutes=0,
                severity="warning",
                summary=f"An endpoint picker of {m.name} restarted in the last {RESTART_WINDOW}",
                description=("Each restart sends new requests to the dead picker for 5-10 s before the gateway "
                             "gives up on it: a burst of 500s users see, too short for EndpointPickerDown."),
                runbook_base_url=runbook_base_url,
                labels=labels,
            ),
            alert_rule(
                alert="EndpointPickerDown",
                expr=f"sum(up{{{job}}}) == 0 or absent(up{{{job}}})",
                for_minutes=1,
                severity="critical",
                summary=f"No endpoint picker of {m.name} is up: every request to the model fails",
                description=("Envoy AI Gateway v1.1.0 fails closed when the picker is unreachable, whatever the "
                             "pool's failureMode says. Check the picker pods, or switch the model's route to "
                             "`routing: service`."),
                runbook_base_url=runbook_base_url,
                labels=labels,
            ),
            alert_rule(
                alert="EndpointPickerDegraded",
                expr=f"sum(up{{{job}}}) < {replicas}",
                for_minutes=10,
                severity="warning",
                summary=f"Fewer than {replicas} endpoint pickers of {m.name} are up: one more failure is an outage",
                description="A picker pod is down or not scraped; the remaining one carries every request.",
                runbook_base_url=runbook_base_url,
                labels=labels,
            ),
            alert_rule(
                alert="EndpointPickerErrors",
                # The overload path's 429s are shedding, not failures (ModelShedding says so).
                expr=(f"sum(rate(llm_d_epp_request_error_total{{{job}, {NOT_SHEDDING}}}[5m])) / "
                      f"sum(rate(llm_d_epp_request_total{{{job}}}[5m])) > {ERROR_RATIO}"),
                for_minutes=5,
                severity="warning",
                summary=f"More than {ERROR_RATIO:.0%} of {m.name}'s requests fail in the endpoint picker",
                description="The picker could not place requests (no ready replica, or a replica it could not reach).",
                runbook_base_url=runbook_base_url,
                labels=labels,
            ),
            alert_rule(
                alert="EndpointPickerSaturated",
                expr=(f"histogram_quantile(0.99, sum by (le) (rate(llm_d_epp_scheduler_e2e_duration_seconds_bucket"
                      f"{{{job}}}[5m]))) > {SCHEDULING_P99_SECONDS}"),
                for_minutes=10,
                severity="warning",
                summary=(f"{m.name}'s endpoint picker takes over {SCHEDULING_P99_SECONDS * 1000:.0f} ms (p99) "
                         "to place a request"),
                description="Scheduling time adds to every time to first token: give the picker more CPU or replicas.",
                runbook_base_url=runbook_base_url,
                labels=labels,
            ),
            *(_waking_rules(m, job, labels, runbook_base_url) if m.wake_seconds is not None else [alert_rule(
                alert="InferencePoolNoReadyEndpoints",
                expr=f"max(llm_d_epp_ready_endpoints{{{job}}}) == 0",
                for_minutes=2,
                severity="critical",
                summary=f"{m.name}'s InferencePool has no ready replica",
                description="The picker sees no ready vLLM pod matching the pool's selector on its target port.",
                runbook_base_url=runbook_base_url,
                labels=labels,
            )]),
        ]
        if m.admission is not None and m.admission.flow_control:
            rules += _overload_rules(m, job, labels, runbook_base_url)
        groups.append({"name": f"endpoint-picker-{m.name}", "rules": rules})
        if m.ttft_objective_seconds is not None:
            groups.append(ttft_alert_group(m, runbook_base_url))
    return groups


def _waking_rules(m: RoutedModel, job: str, labels: dict[str, str], runbook_base_url: str) -> list[dict[str, Any]]:
    """A model that scales to zero has no ready replica on purpose; what is a fault is a wake longer than
    planned, and requests the picker drops while it waits (its hold expired, or its queue was full)."""
    assert m.wake_seconds is not None
    none_ready = f"(max(llm_d_epp_ready_endpoints{{{job}}}) == 0)"
    held = f"(sum(llm_d_epp_flow_control_queue_size{{{job}}}) > 0)"
    wake_minutes = math.ceil(m.wake_seconds / 60)
    return [
        alert_rule(
            alert="ModelWakeSlow",
            expr=f"{none_ready} and on () {held}",
            for_minutes=wake_minutes,
            severity="critical",
            summary=(f"{m.name} has held requests at zero replicas for longer than its planned wake "
                     f"({m.wake_seconds} s)"),
            description=("The first requests after an idle spell are waiting for a replica that has not come: no GPU "
                         "node can be added, the pod does not start, or the autoscaler does not see the held "
                         "requests. Their clients are about to time out."),
            runbook_base_url=runbook_base_url,
            labels=labels,
        ),
        alert_rule(
            alert="ModelDroppedWhileWaking",
            expr=(f'(sum(increase(llm_d_epp_flow_control_requests_total{{{job}, outcome=~"{SHED_OUTCOMES}"}}[5m])) '
                  f"> 0) and on () {none_ready}"),
            for_minutes=0,
            severity="warning",
            summary=f"{m.name} dropped requests while waking from zero",
            description=("The picker answered 503 or 429 to requests it held while no replica was ready: the hold "
                         "(defaultRequestTTL) ended before the model woke, or its queue was full."),
            runbook_base_url=runbook_base_url,
            labels=labels,
        ),
    ]


def _overload_rules(m: RoutedModel, job: str, labels: dict[str, str], runbook_base_url: str) -> list[dict[str, Any]]:
    """Shedding that outlasts a scale-out (a normal burst sheds only until the new replica serves), and
    the one fault that sheds with no load at all: replicas whose metrics the picker no longer gets."""
    assert m.admission is not None
    # A burst sheds until the replica KEDA adds serves, and the rate stays positive for its window after:
    # held longer than both, the autoscaler cannot end it.
    shed_minutes = math.ceil(m.admission.scale_out_seconds / 60) + SHED_RATE_MINUTES
    return [
        alert_rule(
            alert="ModelShedding",
            expr=(f'sum(rate(llm_d_epp_flow_control_requests_total{{{job}, outcome=~"{SHED_OUTCOMES}"}}'
                  f"[{SHED_RATE_MINUTES}m])) > 0"),
            for_minutes=shed_minutes,
            severity="warning",
            summary=f"{m.name} has refused requests with 429 for {shed_minutes} minutes: the pool is short of replicas",
            description=(f"Longer than adding a replica takes ({m.admission.scale_out_seconds} s), so the autoscaler "
                         "cannot end it: at maxReplicas, or no GPU node can be added."),
            runbook_base_url=runbook_base_url,
            labels=labels,
        ),
        alert_rule(
            alert="EndpointPickerMetricsStale",
            expr=f"max(llm_d_epp_flow_control_stale_endpoints{{{job}}}) > 0",
            for_minutes=STALE_FOR_MINUTES,
            severity="warning",
            summary=f"{m.name}'s picker counts replicas as full because their metrics are stale",
            description=("A replica whose vLLM /metrics the picker has not read for 2 s counts as saturated: with "
                         "all of them stale the picker dispatches nothing and every request gets a 429."),
            runbook_base_url=runbook_base_url,
            labels=labels,
        ),
    ]
