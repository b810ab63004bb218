"""Grafana dashboards for vLLM serving and GPU health, and the ConfigMaps that provision them.

Pure data, no Pulumi: dashboard JSON built from vLLM 0.33.0 metrics, the endpoint pickers' and Envoy's
own series, kube-state-metrics and only the DCGM fields our counters file exports, labelled for the
kube-prometheus-stack Grafana sidecar.

Length: the serving dashboard shows the edge's, the pickers' and vLLM's view of one request side by side,
and the GPU dashboard shares its panel, variable and layout helpers; split apart, each module would repeat
those helpers, and a reviewer compares the panels' queries with each other here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from llm_serving.platform import ENVOY_GATEWAY_LISTENERS, NODE_LABEL, check_dns_label

# Grafana 11 dashboard schema version (the JSON model Grafana writes back when it saves one).
SCHEMA_VERSION = 39

# kube-prometheus-stack 88.5.3 values.yaml, grafana.sidecar.dashboards: label `grafana_dashboard`,
# labelValue "1", searchNamespace ALL. The sidecar loads every ConfigMap carrying that label.
SIDECAR_LABEL = "grafana_dashboard"
SIDECAR_LABEL_VALUE = "1"
# ConfigMaps hold at most 1 MiB of data (Kubernetes core/v1 ConfigMap).
_CONFIGMAP_MAX_BYTES = 1024 * 1024

# Every panel queries the data source chosen in the dashboard's `datasource` variable, so the same
# JSON works with the chart's Prometheus data source (uid `prometheus`) or an existing Grafana's.
_DS = {"type": "prometheus", "uid": "${datasource}"}
# $__rate_interval: at least four scrape intervals, widening with the zoom (Grafana docs).
_RATE = "$__rate_interval"
_VLLM = 'namespace="$namespace", model_name=~"$model_name"'
_PICKER = 'namespace="$namespace"'
_NAMESPACE = 'namespace="$namespace"'  # series without vLLM's model_name label (vllm:lora_requests_info)
# Envoy's HTTP statistics of the Gateway's own listeners, on the proxies of the chosen edge job.
_EDGE = f'job=~"$edge_job", {ENVOY_GATEWAY_LISTENERS}'
_KSM = 'namespace="$namespace", deployment=~"$deployment"'
_GPU = f'{NODE_LABEL}=~"$node"'


def _datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
    }


def _query_variable(name: str, label: str, definition: str, *, multi: bool) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": _DS,
        "definition": definition,
        "query": definition,
        "refresh": 2,  # on time-range change, so replicas that came and went are listed
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        "current": {},
        "hide": 0,
        "regex": "",
    }


def _target(ref: str, expr: str, legend: str) -> dict[str, Any]:
    return {"refId": ref, "datasource": _DS, "expr": expr, "legendFormat": legend, "range": True}


def _panel(title: str, unit: str, targets: list[tuple[str, str]], description: str = "") -> dict[str, Any]:
    """A timeseries panel; ids and positions are assigned by _layout."""
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": _DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [_target(chr(ord("A") + i), expr, legend) for i, (expr, legend) in enumerate(targets)],
    }


def _layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two panels per row, 8 units high; ids 1..n in order."""
    for index, panel in enumerate(panels):
        panel["id"] = index + 1
        panel["gridPos"] = {"h": 8, "w": 12, "x": (index % 2) * 12, "y": (index // 2) * 8}
    return panels


def _dashboard(
    uid: str, title: str, tags: list[str], variables: list[dict[str, Any]], panels: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": tags,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        # Provisioned from a ConfigMap: edits in the UI would be lost on the next sidecar sync.
        "editable": False,
        "graphTooltip": 1,
        "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [_datasource_variable(), *variables]},
        "panels": _layout(panels),
    }


def _quantiles(series: str, quantiles: tuple[float, ...], selector: str = _VLLM) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by (model_name, le) (rate({series}{{{selector}}}[{_RATE}])))",
            f"{{{{model_name}}}} p{round(q * 100)}",
        )
        for q in quantiles
    ]


_TTFT_QUANTILES = (0.5, 0.95, 0.99)


def serving_dashboard() -> dict[str, Any]:
    """vLLM serving: traffic, queue, KV cache, latency percentiles, token throughput and replicas.

    `namespace` and `pod` come from the PodMonitor's target labels; `model_name` is vLLM's own label.
    Replicas come from kube-state-metrics, selected by Deployment name.
    """
    variables = [
        _query_variable("namespace", "Namespace", "label_values(vllm:num_requests_running, namespace)", multi=False),
        _query_variable(
            "model_name",
            "Model",
            'label_values(vllm:num_requests_running{namespace="$namespace"}, model_name)',
            multi=True,
        ),
        _query_variable(
            "deployment",
            "Deployment",
            'label_values(kube_deployment_spec_replicas{namespace="$namespace"}, deployment)',
            multi=True,
        ),
        # The Gateway's PodMonitor job, <edge namespace>/<gateway>-envoy (gateway mode only).
        _query_variable("edge_job", "Edge", "label_values(envoy_http_downstream_rq_total, job)", multi=False),
    ]
    panels = [
        _panel(
            "Request rate by finish reason",
            "reqps",
            [
                (
                    f"sum by (model_name, finished_reason) (rate(vllm:request_success_total{{{_VLLM}}}[{_RATE}]))",
                    "{{model_name}} {{finished_reason}}",
                )
            ],
            "Finished requests per second; `abort` and `error` are failures seen by clients.",
        ),
        _panel(
            "Running and waiting requests",
            "short",
            [
                (f"sum by (model_name) (vllm:num_requests_running{{{_VLLM}}})", "{{model_name}} running"),
                (f"sum by (model_name) (vllm:num_requests_waiting{{{_VLLM}}})", "{{model_name}} waiting"),
            ],
            "Waiting is the autoscaler's primary signal.",
        ),
        _panel(
            "Time to first token",
            "s",
            _quantiles("vllm:time_to_first_token_seconds_bucket", _TTFT_QUANTILES),
            "vLLM's own: from the request reaching the engine to its first token.",
        ),
        # Beside vLLM's: the same percentiles as the edge sees them (llm-d-router v0.10.0
        # llm_d_epp_request_ttft_seconds, streamed requests only), what the EdgeTtftBudgetBurn alerts read.
        _panel(
            "Time to first token at the edge",
            "s",
            _quantiles("llm_d_epp_request_ttft_seconds_bucket", _TTFT_QUANTILES, f'{_VLLM}, streaming="true"'),
            "Measured by the endpoint picker in Envoy's path, streamed requests only, recorded when a stream "
            "ends; above vLLM's by the picker, Envoy and vLLM's HTTP front end. Models routed to their Service "
            "(routing: service) have no edge TTFT.",
        ),
        _panel(
            "KV-cache usage per pod",
            "percentunit",
            [(f"max by (model_name, pod) (vllm:kv_cache_usage_perc{{{_VLLM}}})", "{{model_name}} {{pod}}")],
            "Above 90 % vLLM preempts running requests; the autoscaler's secondary signal is the mean.",
        ),
        _panel(
            "Inter-token latency",
            "s",
            _quantiles("vllm:inter_token_latency_seconds_bucket", (0.5, 0.95)),
            "Observed per streamed output event; with speculative decoding one event can carry several tokens.",
        ),
        _panel(
            "Generation tokens per second",
            "short",
            [(f"sum by (model_name) (rate(vllm:generation_tokens_total{{{_VLLM}}}[{_RATE}]))", "{{model_name}}")],
        ),
        _panel(
            "Prompt tokens per second",
            "short",
            [(f"sum by (model_name) (rate(vllm:prompt_tokens_total{{{_VLLM}}}[{_RATE}]))", "{{model_name}}")],
        ),
        _panel(
            "Replicas",
            "short",
            [
                (f"sum by (deployment) (kube_deployment_spec_replicas{{{_KSM}}})", "{{deployment}} desired"),
                (
                    f"sum by (deployment) (kube_deployment_status_replicas_available{{{_KSM}}})",
                    "{{deployment}} available",
                ),
            ],
            "From kube-state-metrics: desired (set by the autoscaler) against available (warm and ready).",
        ),
        _panel(
            "End-to-end request latency",
            "s",
            _quantiles("vllm:e2e_request_latency_seconds_bucket", (0.5, 0.95, 0.99)),
        ),
        _panel(
            "Prefix-cache hit rate",
            "percentunit",
            [(
                f"sum by (model_name) (rate(vllm:prefix_cache_hits_total{{{_VLLM}}}[{_RATE}])) / "
                f"sum by (model_name) (rate(vllm:prefix_cache_queries_total{{{_VLLM}}}[{_RATE}]))",
                "{{model_name}}",
            )],
            "Share of prompt tokens served from the KV cache: what prefix-aware routing (InferencePool) raises.",
        ),
        # The edge as users see it: Envoy's HTTP statistics of the Gateway's listeners (envoyproxy.io
        # http_conn_man/stats), what the EdgeErrorBudgetBurn alerts read.
        _panel(
            "Edge: requests per second by response class",
            "reqps",
            [(f"sum by (envoy_response_code_class) (rate(envoy_http_downstream_rq_xx{{{_EDGE}}}[{_RATE}]))",
              "{{envoy_response_code_class}}xx")],
            "Every request the Gateway answered, all models together, by status class.",
        ),
        _panel(
            "Edge: 5xx and resets",
            "percentunit",
            [
                (f'sum(rate(envoy_http_downstream_rq_xx{{{_EDGE}, envoy_response_code_class="5"}}[{_RATE}])) / '
                 f"sum(rate(envoy_http_downstream_rq_total{{{_EDGE}}}[{_RATE}]))", "5xx"),
                (f"sum(rate(envoy_http_downstream_rq_tx_reset{{{_EDGE}}}[{_RATE}])) / "
                 f"sum(rate(envoy_http_downstream_rq_total{{{_EDGE}}}[{_RATE}]))", "reset"),
            ],
            "Shares of all requests; together above 0.5 % they burn the edge's availability budget.",
        ),
        # The endpoint pickers' own series (llm-d-router v0.10.0 pkg/epp/metrics/llm_d_router_metrics.go),
        # present for models routed through an InferencePool; `job` is <namespace>/<model>-epp.
        _panel(
            "Endpoint picker: requests per second",
            "reqps",
            [
                (f"sum by (job) (rate(llm_d_epp_request_total{{{_PICKER}}}[{_RATE}]))", "{{job}}"),
                (f"sum by (job, error_code) (rate(llm_d_epp_request_error_total{{{_PICKER}}}[{_RATE}]))",
                 "{{job}} error {{error_code}}"),
            ],
            "Requests each model's picker placed, and those it could not.",
        ),
        _panel(
            "Endpoint picker: scheduling latency",
            "s",
            [(
                f"histogram_quantile({q}, sum by (job, le) (rate(llm_d_epp_scheduler_e2e_duration_seconds_bucket"
                f"{{{_PICKER}}}[{_RATE}])))",
                f"{{{{job}}}} p{int(q * 100)}",
            ) for q in (0.5, 0.99)],
            "Time to pick a replica; it adds to every time to first token.",
        ),
        _panel(
            "Endpoint picker: replica chosen",
            "reqps",
            [(f"sum by (endpoint_name) (rate(llm_d_epp_scheduler_attempts_total{{{_PICKER}}}[{_RATE}]))",
              "{{endpoint_name}}")],
            "How the picker spreads requests over the pool's replicas (prefix affinity against load).",
        ),
        _panel(
            "Endpoint picker: health",
            "short",
            [
                (f'sum by (job) (up{{{_PICKER}, job=~".+-epp"}})', "{{job}} up"),
                (f'sum by (poddisruptionbudget) (kube_poddisruptionbudget_status_current_healthy{{{_PICKER}, '
                 f'poddisruptionbudget=~".+-epp"}})', "{{poddisruptionbudget}} healthy"),
                (f'sum by (poddisruptionbudget) (kube_poddisruptionbudget_status_desired_healthy{{{_PICKER}, '
                 f'poddisruptionbudget=~".+-epp"}})', "{{poddisruptionbudget}} floor"),
                (f"max by (job) (llm_d_epp_ready_endpoints{{{_PICKER}}})", "{{job}} ready replicas seen"),
            ],
            "Pickers up, healthy against their disruption budget's floor, and the vLLM replicas each one can "
            "pick; the gateway fails closed, so no picker up is the model's outage.",
        ),
        _panel(
            "Prefix-cache hits by tier",
            "short",
            [(f"sum by (model_name, source) (rate(vllm:prompt_tokens_cached_by_source_total{{{_VLLM}}}[{_RATE}]))",
              "{{model_name}} {{source}}")],
            "Prompt tokens served from a cache instead of prefilled, by the tier that held them: device (the GPUs) "
            "and host (the CPU KV tier, models[].kvOffload).",
        ),
        # Per LoRA adapter (and alias), from the picker: `model_name` is the name the request carried, an alias
        # included, `target_model_name` the one the picker sent to vLLM after its rewrite (llm-d-router v0.10.0
        # pkg/epp/handlers/server.go RecordRequestCounter(IncomingModelName, TargetModelName, ...)). vLLM's own
        # series carry the base model's name only.
        _panel(
            "LoRA: requests per second by adapter",
            "reqps",
            [(f"sum by (model_name, target_model_name) (rate(llm_d_epp_request_total{{{_PICKER}}}[{_RATE}]))",
              "{{model_name}} -> {{target_model_name}}")],
            "Requests each picker placed, by the name asked (a base model, an adapter or an alias) and the adapter "
            "it went to: an alias's split between its adapters shows as two lines. Models routed to their Service "
            "have no picker and are not here.",
        ),
        # vLLM 0.33.0 vllm:lora_requests_info (v1/metrics/loggers.py): one series per label set, its value the time
        # the engine last reported that set, so each pod's newest series is its batch now. No model_name label.
        _panel(
            "LoRA: adapters in the batch",
            "short",
            [(f"count by ({label}) (topk by (namespace, pod) (1, vllm:lora_requests_info{{{_NAMESPACE}}}))", legend)
             for label, legend in (("running_lora_adapters", "pods running: {{running_lora_adapters}}"),
                                   ("waiting_lora_adapters", "pods with waiting: {{waiting_lora_adapters}}"))],
            "Pods by the adapters their batch runs, and by the adapters whose requests wait for a slot: more "
            "distinct adapters waiting than maxLoras lets run at once means raise models[].lora.maxLoras.",
        ),
        _panel(
            "Idle and waking (scale to zero)",
            "short",
            [
                (f"sum by (deployment) (kube_deployment_spec_replicas{{{_KSM}}}) == 0", "{{deployment}} idle at zero"),
                (f"sum by (inference_pool) (llm_d_epp_flow_control_queue_size{{{_PICKER}}})",
                 "{{inference_pool}} held in the picker"),
            ],
            "A model at zero replicas is idle; requests held in its picker with no replica ready mean it is waking "
            "(ModelWakeSlow pages when that outlasts the planned wake).",
        ),
    ]
    return _dashboard("llm-serving-vllm", "LLM serving / vLLM", ["llm-serving", "vllm"], variables, panels)


def _gpu_targets(field: str, legend_suffix: str = "") -> tuple[str, str]:
    return f"{field}{{{_GPU}}}", f"{{{{{NODE_LABEL}}}}} GPU {{{{gpu}}}}{legend_suffix}"


def gpu_dashboard(exported_metrics: frozenset[str]) -> dict[str, Any]:
    """GPU health from the DCGM exporter, one series per GPU (`node` from our ServiceMonitor relabeling).

    `exported_metrics` are the DCGM fields the exporter's counters file exports (llm_serving.gpu):
    every panel must query one of them.
    """
    variables = [
        _query_variable("node", "Node", f"label_values(DCGM_FI_DEV_GPU_TEMP, {NODE_LABEL})", multi=True),
    ]

    def rate(field: str) -> str:
        return f"rate({field}{{{_GPU}}}[{_RATE}])"

    def increase_1h(field: str) -> str:
        # ECC events are rare: an hour's increase reads better than a per-second rate.
        return f"increase({field}{{{_GPU}}}[1h])"

    node_gpu = f"{{{{{NODE_LABEL}}}}} GPU {{{{gpu}}}}"
    panels = [
        _panel(
            "GPU utilisation",
            "percent",
            [_gpu_targets("DCGM_FI_DEV_GPU_UTIL")],
            "Share of time any kernel ran; it saturates with one running request, so it is not a load measure.",
        ),
        _panel(
            "Tensor core activity",
            "percentunit",
            [_gpu_targets("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")],
            "Profiling field: needs the exporter's SYS_ADMIN capability and a GPU with DCP support.",
        ),
        _panel(
            "Framebuffer memory",
            "mbytes",
            [_gpu_targets("DCGM_FI_DEV_FB_USED", " used"), _gpu_targets("DCGM_FI_DEV_FB_FREE", " free")],
            "MiB. vLLM preallocates --gpu-memory-utilization of it at start, so used stays flat.",
        ),
        _panel(
            "Temperature",
            "celsius",
            [_gpu_targets("DCGM_FI_DEV_GPU_TEMP", " GPU"), _gpu_targets("DCGM_FI_DEV_MEMORY_TEMP", " memory")],
        ),
        _panel("Power draw", "watt", [_gpu_targets("DCGM_FI_DEV_POWER_USAGE")]),
        _panel(
            "Throttled time per second",
            "ns",
            [
                (rate("DCGM_FI_DEV_THERMAL_VIOLATION"), f"{node_gpu} thermal"),
                (rate("DCGM_FI_DEV_POWER_VIOLATION"), f"{node_gpu} power"),
            ],
            "Time per second spent below application clocks, read as ns (DCGM dcgm_fields.h); older "
            "exporter CSVs said µs, in which case the values are 1000 times too small.",
        ),
        _panel(
            "Xid errors (exporter window)",
            "short",
            [(f'DCGM_EXP_XID_ERRORS_COUNT{{{_GPU}, xid!=""}}', f"{node_gpu} Xid {{{{xid}}}}")],
            "Xid events per code within the exporter's counting window (default 5 minutes); not a counter.",
        ),
        _panel(
            "ECC errors (last hour)",
            "short",
            [
                (increase_1h("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"), f"{node_gpu} single-bit"),
                (increase_1h("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), f"{node_gpu} double-bit"),
            ],
            "Single-bit errors are corrected; any double-bit error means results on that GPU may be wrong.",
        ),
        _panel(
            "Remapped memory rows",
            "short",
            [
                _gpu_targets("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", " correctable"),
                _gpu_targets("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", " uncorrectable"),
                _gpu_targets("DCGM_FI_DEV_ROW_REMAP_FAILURE", " remap failed"),
            ],
        ),
    ]
    dashboard = _dashboard("llm-serving-gpu", "LLM serving / GPUs (DCGM)", ["llm-serving", "gpu"], variables, panels)
    for query in panel_queries(dashboard):
        for name in re.findall(r"\b(DCGM_[A-Z0-9_]+)\b", query):
            if name not in exported_metrics:  # a panel on a field we do not export would stay empty forever
                raise ValueError(f"GPU dashboard queries {name}, which the counters file does not export")
    return dashboard


def panel_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of every panel (rows' collapsed panels included), in panel order."""
    queries: list[str] = []

    def visit(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            queries.extend(target["expr"] for target in panel.get("targets", []) if "expr" in target)
            visit(panel.get("panels", []))

    visit(dashboard.get("panels", []))
    return queries


def dashboard_configmap(
    *,
    name: str,
    namespace: str,
    dashboard: dict[str, Any],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """ConfigMap the Grafana sidecar provisions the dashboard from (one `<name>.json` key)."""
    check_dns_label("name", name)
    check_dns_label("namespace", namespace)
    if not dashboard.get("uid") or not dashboard.get("title"):
        raise ValueError("dashboard needs a uid and a title")
    body = json.dumps(dashboard, indent=1, sort_keys=True)
    if len(body.encode()) > _CONFIGMAP_MAX_BYTES:
        raise ValueError(f"dashboard {dashboard['uid']} is larger than a ConfigMap can hold (1 MiB)")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(labels or {}), SIDECAR_LABEL: SIDECAR_LABEL_VALUE},
        },
        "data": {f"{name}.json": body},
    }
